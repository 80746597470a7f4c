"""``fedsec dpauc``, ``fedsec attack dpauc-counts`` and ``fedsec reproduce`` from the outside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsec.cli import main
from fedsec.data.io import write_party_csv
from fedsec.data.synthetic import CRITEO_LIKE


@pytest.fixture()
def party_files(tmp_path: Path) -> list[str]:
    y, s = CRITEO_LIKE.sample(6000, seed=11)
    paths = []
    for k in range(3):
        p = tmp_path / f"party{k}.csv"
        write_party_csv(p, y[k * 2000:(k + 1) * 2000], s[k * 2000:(k + 1) * 2000])
        paths.append(str(p))
    return paths


def test_dpauc_json(party_files: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dpauc", *party_files, "--epsilon", "8", "--decision-points", "25",
                 "--runs", "5", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"mean", "std", "runs", "epsilon", "mechanism"} <= out.keys()
    assert out["runs"] == 5 and out["epsilon"] == 8.0 and out["mechanism"] == "laplace"
    assert len(out["aucs"]) == 5 and out["std"] > 0
    assert out["epsilon_spent_per_party"] == 40.0
    assert 0.6 < out["mean"] < 0.9


def test_dpauc_rr_text_prints_warning(party_files: list[str],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dpauc", *party_files, "--epsilon", "4", "--mechanism", "rr"]) == 0
    cap = capsys.readouterr()
    assert "AUC =" in cap.out
    assert cap.err.count("privacy warning") == 1


def test_dpauc_gaussian(party_files: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dpauc", *party_files, "--epsilon", "1", "--mechanism", "gaussian",
                 "--delta", "1e-5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mechanism"] == "gaussian" and out["delta"] == 1e-5


def test_attack_counts_json(party_files: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attack", "dpauc-counts", *party_files, "--epsilon", "8",
                 "--decision-points", "25", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["parties"]) == 3
    for p in out["parties"]:
        for key in ("total", "positives", "negatives"):
            assert key in p and f"estimated_{key}" in p
            # eps = 8, N = 25: std 7.1 (total) / 5 (class); 60 is over 8 sigma
            assert abs(p[f"estimated_{key}"] - p[key]) < 60
        assert p["total"] == 2000


def test_attack_counts_text(party_files: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attack", "dpauc-counts", party_files[0], "--epsilon", "1"]) == 0
    assert "party0.csv" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["dpauc", "missing.csv", "--epsilon", "1"],
    ["attack", "dpauc-counts", "missing.csv", "--epsilon", "1"],
    ["reproduce", "--script", "missing_script.py"],
])
def test_bad_input_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--epsilon", "-1"], ["--epsilon", "x"],
                                   ["--epsilon", "1", "--mechanism", "foo"],
                                   ["--epsilon", "1", "--runs", "0"], []])
def test_bad_arguments_exit_2(party_files: list[str], extra: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["dpauc", party_files[0], *extra])
    assert exc.value.code == 2


def test_one_class_federation_and_misuse(tmp_path: Path, party_files: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "pos.csv"
    write_party_csv(p, [1, 1, 1], [0.2, 0.5, 0.9])
    assert main(["dpauc", str(p), "--epsilon", "1"]) == 2
    assert "undefined" in capsys.readouterr().err
    assert main(["dpauc", party_files[0], "--epsilon", "1", "--score-epsilon", "2"]) == 2
    assert "--score-epsilon applies only" in capsys.readouterr().err
    assert main(["attack"]) == 2
