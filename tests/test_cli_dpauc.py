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
    assert "party0 " in capsys.readouterr().out


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
    assert main(["dpauc", str(p), "--epsilon", "1"]) == 5  # undefined result
    assert "undefined" in capsys.readouterr().err
    assert main(["dpauc", party_files[0], "--epsilon", "1", "--score-epsilon", "2"]) == 2
    assert "--score-epsilon applies only" in capsys.readouterr().err
    assert main(["attack"]) == 2


def test_one_run_reports_no_spread(party_files: list[str],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dpauc", *party_files, "--epsilon", "8", "-N", "10"]) == 0
    out = capsys.readouterr().out
    assert "+-" not in out and "one run: no spread" in out
    assert main(["dpauc", *party_files, "--epsilon", "8", "-N", "10", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] == 1 and doc["std"] is None and len(doc["aucs"]) == 1
    assert main(["dpauc", *party_files, "--epsilon", "8", "-N", "10", "--runs", "3"]) == 0
    assert "+-" in capsys.readouterr().out


def test_mean_outside_unit_interval_warns_and_clip_clips(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 4 samples, epsilon 0.01, N = 100: Laplace scale 40,000 per count -> wild estimates
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_party_csv(a, [1, 0], [0.9, 0.1])
    write_party_csv(b, [0, 1], [0.3, 0.7])
    base = ["dpauc", str(a), str(b), "--epsilon", "0.01", "--runs", "20", "--json"]
    assert main(base) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    outside = not 0.0 <= doc["mean"] <= 1.0
    assert ("is outside [0, 1]" in cap.err) == outside
    assert any(not 0.0 <= x <= 1.0 for x in doc["aucs"])  # P(all 20 inside) is negligible
    assert main([*base, "--clip"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["clip"] is True and all(0.0 <= x <= 1.0 for x in doc["aucs"])
    assert "outside [0, 1]" not in cap.err


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity"])
def test_infinite_epsilon_is_refused(party_files: list[str], value: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["dpauc", party_files[0], f"--epsilon={value}"])
    assert exc.value.code == 2
    assert "--epsilon must be finite" in capsys.readouterr().err


def test_dpauc_takes_the_party_file_options(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "excel.csv"
    rows = "".join(f"{'yes' if i % 2 else 'no'};0,{i % 10}\r\n" for i in range(400))
    p.write_bytes(("\ufeffoutcome;prob\r\n" + rows).encode())
    argv = ["dpauc", str(p), "--epsilon", "8", "-N", "10", "--label-col", "outcome",
            "--score-col", "prob", "--pos-label", "yes", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 400
    assert main(["dpauc", str(p), "--epsilon", "1", "--delta", "1e-5"]) == 2
    assert "--delta applies only to --mechanism gaussian" in capsys.readouterr().err


def test_reproduce_passes_its_options_through(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "fake_reproduce.py"
    record = tmp_path / "argv.json"
    script.write_text(
        "import json, pathlib\n"
        "def main(argv):\n"
        f"    pathlib.Path({str(record)!r}).write_text(json.dumps(list(argv)))\n"
        "    return 0\n")
    assert main(["reproduce", "--script", str(script), "--quick", "--out", "res",
                 "--seed", "7"]) == 0
    assert json.loads(record.read_text()) == ["--quick", "--out", "res", "--seed", "7"]
    assert main(["reproduce", "--script", str(script)]) == 0
    assert json.loads(record.read_text()) == []


def test_reproduce_script_accepts_the_options() -> None:
    """The real script parses what `fedsec reproduce` passes (without running it)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "reproduce_dpauc.py"
    source = path.read_text()
    for option in ('"--quick"', '"--out"', '"--seed"'):
        assert f"ap.add_argument({option}" in source
    assert importlib.util.spec_from_file_location("r", path) is not None
