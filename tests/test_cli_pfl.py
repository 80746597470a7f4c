"""``fedsec pfl``: human output, JSON, plots, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from fedsec.cli import main  # noqa: E402

SMALL = ["pfl", "--task", "digits", "--samples", "300", "--clients", "6", "--rounds", "2",
         "--malicious", "0.34", "--seed", "1"]


def test_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*SMALL, "--attack", "none,sign-flip", "--method", "balance,fedavg",
                 "--selection", "brute", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["runs"]) == 4
    assert len(doc["malicious"]) == 2
    bal = [r for r in doc["runs"] if r["method"] == "balance"]
    for r in bal:
        assert len(r["accuracy"]) == 2 and len(r["accuracy"][0]) == 6
        assert all(r["accuracy"][t][i] is None for t in range(2) for i in r["malicious"])
        assert r["checks"] == [30, 30] == r["brute_checks"]
        assert len(r["accepted"]) == 2 and len(r["accepted"][1]) == 6
        assert all(i not in s for i, s in enumerate(r["accepted"][0]))
    avg = [r for r in doc["runs"] if r["method"] == "fedavg"]
    assert all(r["checks"] == [] for r in avg)


def test_human_output_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*SMALL, "--attack", "gaussian", "--deployment", "ring", "--plot",
                 str(tmp_path / "figs"), "--graph-round", "1", "--gamma-uniform", "0.1",
                 "0.5"])
    assert code == 0
    cap = capsys.readouterr()
    assert "gaussian" in cap.out and "balance" in cap.out and "12/12" in cap.out
    assert "gamma=per client in [0.1" in cap.out
    assert "round 2/2" in cap.err  # progress on stderr
    for name in ("accuracy.png", "acceptance.png"):
        data = (tmp_path / "figs" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize("argv, needle", [
    (["--attack", "bogus"], "--attack"),
    (["--malicious", "0.5"], "--malicious"),
    (["--method", "avg"], "--method"),
    (["--clients", "1"], "--clients"),
])
def test_bad_arguments_exit_2(argv: list[str], needle: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*SMALL, *argv])
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_attack_without_malicious_clients(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--malicious", "0", "--attack", "ipm"]) == 2
    assert "malicious" in capsys.readouterr().err
    assert main([*SMALL, "--graph-round", "3"]) == 2
    assert main([*SMALL, "--gamma-uniform", "0.5", "0.1"]) == 2
