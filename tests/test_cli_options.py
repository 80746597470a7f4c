"""Option types built from the library's checks, messages that speak of the command's
options, and help text free of internal labels."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsec._validation import check_choice, check_int, check_real
from fedsec.cli import build_parser, cli_text, main
from fedsec.cli.common import arg_type, list_arg
from fedsec.data.io import write_party_csv

ROOT = Path(__file__).resolve().parents[1]


def _refusal(parse: object, text: str) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        parse(text)  # type: ignore[operator]
    return str(info.value)


def test_arg_type_applies_the_library_check_and_names_the_option() -> None:
    runs = arg_type(check_int, "--runs", min_value=2, max_value=8)
    assert runs("5") == 5
    assert _refusal(runs, "1") == "--runs must be in 2..8; got '1'"
    assert _refusal(runs, "9") == "--runs must be in 2..8; got '9'"
    assert _refusal(runs, "two") == "--runs must be an integer; got 'two'"
    tol = arg_type(check_real, "--tolerance", gt=0.0, lt=0.5)
    assert tol("1e-7") == 1e-7
    assert _refusal(tol, "0") == "--tolerance must be > 0 and < 0.5; got '0'"
    assert _refusal(tol, "nan") == "--tolerance must be finite; got 'nan'"
    assert _refusal(tol, "x") == "--tolerance must be a number; got 'x'"
    # the same rule the Python parameter obeys, from the same function
    with pytest.raises(ValueError, match="'runs' parameter of f must be >= 2"):
        check_int(1, "runs", "f", min_value=2, max_value=8)
    pick = arg_type(check_choice, "--mode", choices=("a", "b"))
    assert pick("b") == "b" and _refusal(pick, "c") == "--mode must be one of 'a', 'b'; got 'c'"


def test_list_arg() -> None:
    methods = list_arg("--method", ("balance", "krum"))
    assert methods("krum, balance,krum") == ["krum", "balance"]
    assert "--method must be one of 'balance', 'krum'; got 'x'" in _refusal(methods, "krum,x")
    assert list_arg("--attack", ("none", "lie"), everything=True)("all") == ["none", "lie"]
    assert "comma-separated" in _refusal(methods, " , ")


def test_cli_text_speaks_of_options_only_where_they_exist() -> None:
    options = frozenset({"--score-epsilon", "--max-points", "--max-rounds", "--schedule",
                         "--runs"})
    assert cli_text("pass score_epsilon to perturb scores", options) == \
        "pass --score-epsilon to perturb scores"
    assert cli_text("raise max_points / max_rounds", options) == \
        "raise --max-points / --max-rounds"
    assert cli_text("The 'runs' parameter of secure_auc_malicious must be >= 2.", options) \
        == "--runs must be >= 2."
    assert cli_text("or pass schedule='paper' to accept", options) == \
        "or pass --schedule paper to accept"
    # names that are no option of this command, file names and dotted names stay
    for text in ("max_total_samples=1048576", "my_party.csv: row 2", "fedsec.auc.fhauc",
                 "The 'tolerance' parameter of f", "'score_epsilon'"):
        assert cli_text(text, options) == text


def _parties(tmp_path: Path) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(2):
        y = rng.integers(0, 2, 200)
        paths.append(str(tmp_path / f"p{i}.csv"))
        write_party_csv(paths[-1], y, np.clip(0.3 * y + 0.7 * rng.random(200), 0, 1))
    return paths


def test_rr_warning_names_the_option_once(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dpauc", *_parties(tmp_path), "--epsilon", "1", "--mechanism", "rr",
                 "--runs", "3"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "score histogram" in line]
    assert len(lines) == 1  # once, though three runs warned
    assert lines[0].startswith("fedsec: privacy warning: ")
    assert "pass --score-epsilon" in lines[0] and "score_epsilon" not in err
    assert ".py" not in err and "warnings.warn" not in err  # no source location


def test_exact_mode_warning_names_the_options(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["auc", *_parties(tmp_path), "-N", "exact", "--max-points", "1024",
                 "--max-rounds", "1", "-q"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("fedsec: warning: exact mode:")
    assert "--max-points / --max-rounds" in err and "max_points" not in err
    assert len(err.splitlines()) == 1


def _every_help(parser: argparse.ArgumentParser) -> list[str]:
    out = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                out += _every_help(child)
    return out


def test_help_has_no_internal_labels_and_pfl_is_not_only_in_the_clear() -> None:
    parser = build_parser()
    texts = _every_help(parser)
    assert len(texts) > 15
    for text in texts:
        assert not re.search(r"(?i)seed 00[0-4]|issue [0-9]", text), text[:200]
    top = parser.format_help()
    pfl = next(line for line in top.splitlines() if line.strip().startswith("pfl"))
    assert "--secure" in top[top.index(pfl.strip()):][:300]


def test_every_option_has_help() -> None:
    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in set(action.choices.values()):
                    walk(child)
            elif action.option_strings:
                assert action.help, (parser.prog, action.option_strings)
    walk(build_parser())


def test_python_dash_m_fedsec() -> None:
    for module in ("fedsec", "fedsec.cli"):
        out = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True,
                             text=True, env={"PYTHONPATH": str(ROOT / "src")}, timeout=120)
        assert out.returncode == 0 and out.stdout.startswith("fedsec "), out.stderr
