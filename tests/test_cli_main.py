"""The ``fedsec`` command as a whole: help everywhere, exit statuses, closed pipes."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fedsec.cli.auc
from fedsec.cli import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_CODES,
    EXIT_PROTOCOL,
    EXIT_TAMPERING,
    EXIT_UNDEFINED,
    build_parser,
    main,
)
from fedsec.data.io import write_party_csv
from fedsec.errors import (
    PolicyViolation,
    ProtocolError,
    TamperingDetected,
    UndefinedMetricError,
)

ROOT = Path(__file__).resolve().parents[1]


def _parsers(parser: argparse.ArgumentParser, path: str) -> Iterator[
        tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                assert helps.get(name), f"'{path} {name}' has no help in the command list"
                yield from _parsers(sub, f"{path} {name}")


def test_every_command_and_option_has_help() -> None:
    seen = 0
    for path, parser in _parsers(build_parser(), "fedsec"):
        assert parser.description or path == "fedsec", f"'{path}' has no description"
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            name = "/".join(action.option_strings) or action.dest
            assert action.help and action.help.strip(), f"'{path} {name}' has no help text"
            seen += 1
    assert seen > 60  # the walk really went through every sub-command


def test_help_epilog_documents_every_exit_code() -> None:
    text = build_parser().format_help()
    for code, meaning in EXIT_CODES.items():
        assert f"  {code:<4} {meaning.split(':')[0]}" in text
    assert len(set(EXIT_CODES)) == len(EXIT_CODES)
    assert {EXIT_BAD_INPUT, EXIT_TAMPERING, EXIT_PROTOCOL, EXIT_UNDEFINED} == {2, 3, 4, 5}


def test_readme_documents_every_exit_code() -> None:
    readme = (ROOT / "docs" / "guide" / "command-line.md").read_text()  # moved from README
    for code in EXIT_CODES:
        assert f"| {code} |" in readme, code


@pytest.mark.parametrize(("error", "code", "text"), [
    (TamperingDetected("runs disagree", check="double-execution"), EXIT_TAMPERING,
     "TAMPERING DETECTED (double-execution)"),
    (ProtocolError("truncated message"), EXIT_PROTOCOL, "protocol error: truncated"),
    (PolicyViolation("too few parties", check="quorum"), EXIT_PROTOCOL, "policy: quorum"),
    (UndefinedMetricError("one class"), EXIT_UNDEFINED, "undefined result: one class"),
    (ValueError("bad option"), EXIT_BAD_INPUT, "error: bad option"),
    (PermissionError(13, "Permission denied", "x.csv"), EXIT_BAD_INPUT,
     "x.csv: Permission denied"),
])
def test_each_failure_has_its_own_exit_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            error: Exception, code: int, text: str) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_party_csv(a, [1, 0], [0.9, 0.1])
    write_party_csv(b, [1, 0], [0.8, 0.2])

    def fail(*_args: object, **_kw: object) -> None:
        raise error

    monkeypatch.setattr(fedsec.cli.auc, "_run", fail)
    assert main(["auc", str(a), str(b)]) == code
    err = capsys.readouterr().err
    assert text in err
    if code != EXIT_TAMPERING:
        assert "TAMPERING" not in err


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "exit status:" in capsys.readouterr().out


def _run_cli(args: list[str], **kw: object) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.Popen([sys.executable, "-m", "fedsec.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`fedsec check *.csv | head -1`: no traceback, no 'Exception ignored' line."""
    files = []
    for i in range(1500):  # ~400 kB of output, far more than a pipe buffer holds
        p = tmp_path / f"p{i}.csv"
        p.write_text("label,score\n1,0.5\n0,0.25\n")
        files.append(str(p))
    with _run_cli(["check", *files]) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert b"OK" in first
    assert err == ""


def test_closed_pipe_on_help_ends_quietly() -> None:
    with _run_cli(["auc", "--help"]) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    assert "Traceback" not in err and "Exception ignored" not in err
    assert code in (0, EXIT_BROKEN_PIPE)  # 0 if the help fit the pipe before it closed


def test_warnings_print_as_one_fedsec_line_each(capsys) -> None:
    """A warning raised under a sub-command is one ``fedsec: warning:`` line (no file
    path or source line), printed once however often it is raised."""
    import argparse
    import warnings

    from fedsec.cli import _run
    from fedsec.errors import PrecisionWarning, PrivacyWarning

    def noisy(_args: argparse.Namespace) -> int:
        for _ in range(3):  # e.g. once per worker
            warnings.warn("scores tied", PrecisionWarning, stacklevel=1)
        warnings.warn("labels leak", PrivacyWarning, stacklevel=1)
        return 0

    assert _run(argparse.Namespace(func=noisy)) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == ["fedsec: warning: scores tied",
                                "fedsec: privacy warning: labels leak"]
