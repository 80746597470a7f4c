"""`fedsec auc` and `fedsec demo` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsec.cli import main
from fedsec.data.io import write_party_csv
from fedsec.metrics import confusion_counts, trapezoid_auc_from_counts


@pytest.fixture()
def party_files(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(3)
    paths = []
    for i, n in enumerate([40, 7, 90]):
        y = rng.integers(0, 2, n)
        s = np.round(rng.random(n), 2)
        p = tmp_path / f"hospital-{i}.csv"
        write_party_csv(p, y, s)
        paths.append(p)
    only_pos = tmp_path / "one-class.csv"
    write_party_csv(only_pos, [1, 1, 1], [0.2, 0.5, 1.0])
    paths.append(only_pos)  # a party with one class is valid
    return paths


def _pooled(paths: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    ys, ss = [], []
    for p in paths:
        data = np.loadtxt(p, delimiter=",", skiprows=1, ndmin=2)
        ys.append(data[:, 0].astype(int))
        ss.append(data[:, 1])
    return np.concatenate(ys), np.concatenate(ss)


def test_auc_json_semi_honest(party_files: list[Path], capsys: pytest.CaptureFixture[str]
                              ) -> None:
    code = main(["auc", *map(str, party_files), "--decision-points", "64", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("auc", "parties", "decision_points", "security", "bytes_up_per_party",
                "bytes_down_per_party", "aggregator_seconds"):
        assert key in out
    y, s = _pooled(party_files)
    ref = trapezoid_auc_from_counts(*confusion_counts(y, s, 64))
    assert abs(out["auc"] - ref) <= 1e-9 * ref
    assert out["parties"] == 4 and out["decision_points"] == 64
    assert out["security"] == "semi-honest"
    assert out["bytes_up_per_party"] > 0 and out["aggregator_seconds"] > 0


def test_auc_json_threshold_keys(party_files: list[Path],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--keys threshold``: no party holds the whole key; the AUC is the same."""
    code = main(["auc", *map(str, party_files[:3]), "-N", "32", "--keys", "threshold",
                 "--json", "-q"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    y, s = _pooled(party_files[:3])
    ref = trapezoid_auc_from_counts(*confusion_counts(y, s, 32))
    assert abs(out["auc"] - ref) <= 1e-9 * ref
    assert out["preset"] == "CKKS_128_N16384_DEPTH1_S60" and out["keys"] == "threshold"
    assert main(["auc", *map(str, party_files[:2]), "--keys", "threshold",
                 "--decision-points", "exact"]) == 2


def test_auc_json_malicious(party_files: list[Path], capsys: pytest.CaptureFixture[str]
                            ) -> None:
    code = main(["auc", *map(str, party_files), "-N", "50", "--security", "malicious",
                 "--splits", "4", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    y, s = _pooled(party_files)
    assert abs(out["auc"] - trapezoid_auc_from_counts(*confusion_counts(y, s, 50))) <= 1e-6
    assert out["verified"] is True and out["security"] == "malicious"
    assert out["cheat_bound_bits"] >= 40


def test_human_output(party_files: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["auc", *map(str, party_files[:2]), "-N", "10", "-q"]) == 0
    text = capsys.readouterr().out
    assert "secure AUC" in text and "upload per party" in text


@pytest.mark.parametrize(("content", "message"), [
    ("", "file is empty"),
    ("lab,score,extra\n1,0.5,3\n", "row 1: no label column 'label'"),
    ("label\n1\n", "row 1: no score column 'score'"),
    ("label,score\n1,0.5\n1,0.5,7\n", "row 3: expected 2 columns"),
    ("label,score\n2,0.5\n", "row 2: label must be 0/1, True/False or -1/1"),
    ("label,score\n1,nan\n", "row 2: score must be finite"),
    ("label,score\n1,inf\n", "row 2: score must be finite"),
    ("label,score\n0,1.5\n", "row 2: score must be in [0, 1]"),
    ("label,score\n0,-0.1\n", "row 2: score must be in [0, 1]"),
    ("label,score\n0,abc\n", "row 2: score must be a number"),
    ("label,score\n", "no data rows"),
])
def test_bad_files_name_file_row_and_rule(tmp_path: Path, party_files: list[Path],
                                          capsys: pytest.CaptureFixture[str], content: str,
                                          message: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    code = main(["auc", str(party_files[0]), str(bad)])
    err = capsys.readouterr().err
    assert code == 2
    assert "bad.csv" in err and message in err


def test_non_utf8_file_exits_2_naming_row(tmp_path: Path, party_files: list[Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "latin1.csv"
    bad.write_bytes(b"label,score\n1,0.5\n0,0\xb75\n")
    assert main(["auc", str(party_files[0]), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "latin1.csv, row 3: the score is not valid UTF-8 (byte 0xb7)" in err


def test_exit_codes_for_undefined_and_bad_input(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "a.csv"
    b = tmp_path / "b.csv"
    write_party_csv(a, [1, 1], [0.1, 0.9])
    write_party_csv(b, [1], [0.5])
    assert main(["auc", str(a), str(b)]) == 5  # undefined result, not bad input
    err = capsys.readouterr().err
    assert "undefined result" in err and "3 samples" in err
    write_party_csv(b, [0], [0.5])
    with pytest.raises(SystemExit) as exc:  # refused while parsing the options
        main(["auc", str(a), str(b), "--decision-points", "1"])
    assert exc.value.code == 2
    assert "--decision-points must be >= 2" in capsys.readouterr().err
    assert main(["auc", str(a), str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err
    assert main(["auc", str(a), str(b), "--splits", "3"]) == 2
    assert "apply to --security malicious only" in capsys.readouterr().err
    assert main(["auc", str(a)]) == 2
    assert "at least 2 parties" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "lifts"), [
    (["-N", "70000"], "--decision-points exact"),
    (["-N", "70000", "--security", "malicious"], "no option lifts this"),
])
def test_size_limits_name_what_lifts_them(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          argv: list[str], lifts: str) -> None:
    a = tmp_path / "a.csv"
    write_party_csv(a, [1, 0], [0.1, 0.9])
    assert main(["auc", str(a), str(a.with_name("b.csv")), *argv]) == 2
    err = capsys.readouterr().err
    assert lifts in err and "missing" not in err


def test_sample_limit_is_checked_before_encryption(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import fedsec.auc.common as common

    monkeypatch.setattr(common, "DEFAULT_MAX_TOTAL_SAMPLES", 3)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_party_csv(a, [1, 0], [0.1, 0.9])
    write_party_csv(b, [1, 0], [0.2, 0.8])
    assert main(["auc", str(a), str(b)]) == 2
    assert "the federation holds 4 samples" in capsys.readouterr().err


def test_excel_and_pandas_files_and_names(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's files, unedited: Excel (BOM, CRLF, ';', decimal comma) and pandas
    (index column), in a site-a/scores.csv layout."""
    (tmp_path / "site-a").mkdir()
    (tmp_path / "site-b").mkdir()
    excel = tmp_path / "site-a" / "scores.csv"
    excel.write_bytes("\ufeffLabel;Score\r\n1;0,9\r\n0;0,2\r\n1;0,4\r\n".encode())
    pandas = tmp_path / "site-b" / "scores.csv"
    pandas.write_text(",label,score\n0,0,0.3\n1,1,0.8\n2,0,1.0000000000000002\n")
    assert main(["auc", str(excel), str(pandas), "-N", "20", "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["included"] == ["site-a/scores", "site-b/scores"]
    y = np.array([1, 0, 1, 0, 1, 0])
    s = np.array([0.9, 0.2, 0.4, 0.3, 0.8, 1.0])
    # CKKS noise: with 3 x 3 samples the normalised error can pass 1e-8 (the 1e-9 target
    # is for 100 samples and more), so the tolerance is CKKS's, not the grid's
    assert abs(out["auc"] - trapezoid_auc_from_counts(*confusion_counts(y, s, 20))) < 1e-6
    assert main(["auc", str(excel), str(pandas), "-N", "20", "--json", "-q",
                 "--name", "hospital-a", "--name", "hospital-b"]) == 0
    assert json.loads(capsys.readouterr().out)["included"] == ["hospital-a", "hospital-b"]


def test_label_and_score_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("id,diagnosis,prob\n1,malignant,0.9\n2,benign,0.2\n")
    b.write_text("id,diagnosis,prob\n3,benign,0.6\n4,malignant,0.7\n")
    argv = ["auc", str(a), str(b), "-N", "10", "--json", "-q", "--label-col", "diagnosis",
            "--score-col", "prob"]
    assert main(argv) == 2
    assert "--pos-label" in capsys.readouterr().err
    assert main([*argv, "--pos-label", "malignant"]) == 0
    out = json.loads(capsys.readouterr().out)
    y, s = np.array([1, 0, 0, 1]), np.array([0.9, 0.2, 0.6, 0.7])
    # 2 x 2 samples: CKKS noise alone reached 1.3e-8 in one CI run (see above)
    assert abs(out["auc"] - trapezoid_auc_from_counts(*confusion_counts(y, s, 10))) < 1e-6


def test_check_validates_locally(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.csv.gz"
    write_party_csv(good, [1, 0, 1], [0.9, 0.1, 1.0])
    one = tmp_path / "one.csv"
    write_party_csv(one, [1], [0.5])
    assert main(["check", str(good), str(one)]) == 0
    out = capsys.readouterr().out
    assert "good.csv.gz: OK (party name good)" in out
    assert "rows: 3   positives: 2   negatives: 1" in out and "gzip" in out
    assert "one class only" in out
    bad = tmp_path / "bad.csv"
    bad.write_text("label,score\n1,2\n")
    assert main(["check", str(good), str(bad), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert doc["files"][0]["ok"] is True and doc["files"][0]["positives"] == 2
    assert "row 2: score must be in [0, 1]" in doc["files"][1]["error"]


def test_demo_runs_end_to_end() -> None:
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "fedsec.cli", "demo", "--hospitals", "3"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "FHAUC, semi-honest aggregator" in proc.stdout
    assert "FHAUC, malicious aggregator" in proc.stdout
    assert "scikit-learn roc_auc_score" in proc.stdout
    assert "malicious    parties raise TamperingDetected" in proc.stdout


@pytest.mark.parametrize(("argv", "message"), [
    (["--security", "malicious", "--runs", "1"], "--runs must be in 2..8; got '1'"),
    (["--security", "malicious", "--splits", "1"], "--splits must be in 2..64"),
    (["--security", "malicious", "--tolerance", "0"], "--tolerance must be > 0"),
    (["--security", "malicious", "--tolerance", "nan"], "--tolerance must be finite"),
    (["--security", "malicious", "--min-bound-bits", "-3"], "--min-bound-bits must be >= 0"),
    (["-N", "many"], "--decision-points must be an integer"),
])
def test_malicious_options_are_checked_in_the_users_terms(
        party_files: list[Path], capsys: pytest.CaptureFixture[str], argv: list[str],
        message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["auc", *map(str, party_files[:2]), *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "MaliciousConfig" not in err


def _logit_files(tmp_path: Path) -> tuple[list[Path], float]:
    """decision_function scores of a linear model on breast cancer, over three parties."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    x, y = load_breast_cancer(return_X_y=True)
    model = LogisticRegression(max_iter=5000).fit(x[:300], y[:300])
    s, yy = model.decision_function(x[300:]), y[300:]
    paths = []
    for i, idx in enumerate(np.array_split(np.arange(len(yy)), 3)):
        p = tmp_path / f"site-{i}.csv"
        p.write_text("label,score\n" + "".join(f"{a},{float(b)!r}\n"
                                               for a, b in zip(yy[idx], s[idx], strict=True)))
        paths.append(p)
    return paths, float(roc_auc_score(yy, s))


def test_exact_mode_and_logit_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    paths, ref = _logit_files(tmp_path)
    # logits are refused as probabilities, and the message says how to declare them
    assert main(["auc", *map(str, paths), "-q"]) == 2
    assert "--scores logit" in capsys.readouterr().err
    assert main(["auc", *map(str, paths), "--scores", "logit", "--decision-points", "exact",
                 "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decision_mode"] == "exact" and out["target_reached"] is True
    assert out["error_bound"] <= 1e-6
    assert abs(out["auc"] - ref) <= out["error_bound"] + 1e-9
    # the default grid reports its certified bound, and it holds
    assert main(["auc", *map(str, paths), "--scores", "logit", "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decision_mode"] == "fixed" and 0 < out["error_bound"] < 0.01
    assert abs(out["auc"] - ref) <= out["error_bound"] + 1e-9
    # exact-mode options need exact mode; bad --scores is a usage error
    assert main(["auc", *map(str, paths), "--scores", "logit", "--target", "1e-3", "-q"]) == 2
    assert "exact only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["auc", *map(str, paths), "--scores", "range:1:0"])
    assert exc.value.code == 2
