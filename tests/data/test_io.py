"""Party CSV files: every rule, with the file and row named in the message."""

from __future__ import annotations

import numpy as np
import pytest

from fedsec.data.io import (
    PartyFileError,
    load_party_csv,
    load_party_csvs,
    write_party_csv,
)
from fedsec.errors import UndefinedMetricError


def write(tmp_path, text, name="party.csv"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_loads_a_valid_file(tmp_path):
    p = write(tmp_path, "label,score\n0,0.1\n1,0.9\n1,1\n0,0\n1.0,0.5\n0.0,1e-3\n")
    d = load_party_csv(p)
    assert d.name == "party.csv"
    np.testing.assert_array_equal(d.y_true, [0, 1, 1, 0, 1, 0])
    np.testing.assert_array_equal(d.y_score, [0.1, 0.9, 1.0, 0.0, 0.5, 0.001])
    assert d.y_true.dtype == np.int64 and d.y_score.dtype == np.float64
    assert d.n_samples == 6


def test_header_spaces_case_and_blank_lines_are_tolerated(tmp_path):
    p = write(tmp_path, " Label , SCORE \n\n1, 0.25 \n\n0,0.75\n")
    d = load_party_csv(str(p))
    np.testing.assert_array_equal(d.y_true, [1, 0])


def test_one_class_party_is_valid(tmp_path):
    d = load_party_csv(write(tmp_path, "label,score\n1,0.2\n1,0.3\n"))
    assert d.y_true.tolist() == [1, 1]


def test_round_trip_with_writer(tmp_path):
    g = np.random.default_rng(0)
    y, s = g.integers(0, 2, 50), g.random(50)
    s[:2] = [0.0, 1.0]
    write_party_csv(tmp_path / "w.csv", y, s)
    d = load_party_csv(tmp_path / "w.csv")
    np.testing.assert_array_equal(d.y_true, y)
    np.testing.assert_array_equal(d.y_score, s)  # repr() round-trips floats exactly


@pytest.mark.parametrize("text, row, rule", [
    ("label,score,extra\n0,0.1,1\n", 1, "header must be exactly 'label,score'"),
    ("score,label\n0.1,0\n", 1, "header must be exactly"),
    ("label\n0\n", 1, "header must be exactly"),
    ("y,p\n0,0.1\n", 1, "header must be exactly"),
    ("label,score\n0,0.1\n1\n", 3, "expected 2 columns"),
    ("label,score\n0,0.1\n1,0.2,0.3\n", 3, "expected 2 columns (label,score); got 3"),
    ("label,score\n2,0.1\n", 2, "label must be 0 or 1; got '2'"),
    ("label,score\n0,0.1\n-1,0.5\n", 3, "label must be 0 or 1"),
    ("label,score\nyes,0.1\n", 2, "label must be 0 or 1"),
    ("label,score\n,0.1\n", 2, "label must be 0 or 1"),
    ("label,score\n0.5,0.1\n", 2, "label must be 0 or 1"),
    ("label,score\n1,abc\n", 2, "score must be a number"),
    ("label,score\n1,\n", 2, "score must be a number"),
    ("label,score\n0,0.2\n1,nan\n", 3, "score must be finite"),
    ("label,score\n1,inf\n", 2, "score must be finite"),
    ("label,score\n1,-inf\n", 2, "score must be finite"),
    ("label,score\n1,1.5\n", 2, "score must be in [0, 1]"),
    ("label,score\n1,-0.01\n", 2, "score must be in [0, 1]"),
    ("label,score\n0,0.1\n\n\n1,7\n", 5, "score must be in [0, 1]"),
])
def test_bad_rows_name_file_row_and_rule(tmp_path, text, row, rule):
    p = write(tmp_path, text)
    with pytest.raises(PartyFileError) as info:
        load_party_csv(p)
    msg = str(info.value)
    assert str(p) in msg
    assert f"row {row}:" in msg
    assert rule in msg


@pytest.mark.parametrize("text, rule", [
    ("", "file is empty"),
    ("label,score\n", "no data rows"),
    ("label,score\n\n\n", "no data rows"),
])
def test_empty_files_name_the_file(tmp_path, text, rule):
    p = write(tmp_path, text)
    with pytest.raises(PartyFileError) as info:
        load_party_csv(p)
    assert str(p) in str(info.value) and rule in str(info.value)


def test_party_file_error_is_a_value_error():
    assert issubclass(PartyFileError, ValueError)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        load_party_csv(tmp_path / "nope.csv")
    with pytest.raises(IsADirectoryError, match=str(tmp_path)):
        load_party_csv(tmp_path)


def test_load_many_requires_both_classes_overall(tmp_path):
    a = write(tmp_path, "label,score\n1,0.2\n", "a.csv")
    b = write(tmp_path, "label,score\n1,0.7\n1,0.1\n", "b.csv")
    with pytest.raises(UndefinedMetricError, match="all 3 samples across 2 party file"):
        load_party_csvs([a, b])
    c = write(tmp_path, "label,score\n0,0.5\n", "c.csv")
    parties = load_party_csvs([a, b, c])
    assert [p.name for p in parties] == ["a.csv", "b.csv", "c.csv"]
    with pytest.raises(ValueError):
        load_party_csvs([])


def test_load_many_reports_the_bad_file(tmp_path):
    a = write(tmp_path, "label,score\n1,0.2\n0,0.1\n", "a.csv")
    b = write(tmp_path, "label,score\n1,0.7\n3,0.1\n", "b.csv")
    with pytest.raises(PartyFileError, match=r"b\.csv, row 3: label must be 0 or 1"):
        load_party_csvs([a, b])
