"""Progress lines on the command line: time stamps, and an ETA for rounds of a series."""

from __future__ import annotations

from fedsec.cli.common import progress_printer


def test_rounds_get_an_eta_until_the_last(capsys) -> None:
    say = progress_printer(False)
    say("key set-up")
    for k in range(1, 4):
        say(f"secure/none round {k}/3: benign mean 0.8")
    say("hesv: round 1/2 done (ETA 5 s)")  # a line that brings its own estimate
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5 and all(line.startswith("[") for line in lines)
    # round 1 starts the clock (it includes whatever came before); 2 of 3 has a pace
    assert "ETA" not in lines[1] and "(ETA " in lines[2] and "ETA" not in lines[3]
    assert lines[4].endswith("(ETA 5 s)") and lines[4].count("ETA") == 1


def test_quiet_prints_nothing(capsys) -> None:
    progress_printer(True)("round 1/2")
    assert capsys.readouterr().err == ""
