"""Party CSV files: every format users' tools write, and every rule, with the file and row
named in the message."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsec.data.io import (
    PartyFileError,
    load_party_csv,
    load_party_csvs,
    party_names,
    write_party_csv,
)
from fedsec.errors import UndefinedMetricError


def write(tmp_path: Path, text: str, name: str = "party.csv") -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(text.encode("utf-8"))
    return p


def test_loads_a_valid_file(tmp_path: Path) -> None:
    p = write(tmp_path, "label,score\n0,0.1\n1,0.9\n1,1\n0,0\n1.0,0.5\n0.0,1e-3\n")
    d = load_party_csv(p)
    assert d.name == "party"
    np.testing.assert_array_equal(d.y_true, [0, 1, 1, 0, 1, 0])
    np.testing.assert_array_equal(d.y_score, [0.1, 0.9, 1.0, 0.0, 0.5, 0.001])
    assert d.y_true.dtype == np.int64 and d.y_score.dtype == np.float64
    assert d.n_samples == 6 and d.n_positives == 3
    assert d.info is not None and d.info.delimiter == "comma" and not d.info.compressed


def test_header_spaces_case_and_blank_lines_are_tolerated(tmp_path: Path) -> None:
    p = write(tmp_path, "\n Label , SCORE \n\n1, 0.25 \n\n0,0.75\n")
    d = load_party_csv(str(p))
    np.testing.assert_array_equal(d.y_true, [1, 0])


def test_one_class_party_is_valid(tmp_path: Path) -> None:
    d = load_party_csv(write(tmp_path, "label,score\n1,0.2\n1,0.3\n"))
    assert d.y_true.tolist() == [1, 1]


def test_round_trip_with_writer(tmp_path: Path) -> None:
    g = np.random.default_rng(0)
    y, s = g.integers(0, 2, 50), g.random(50)
    s[:2] = [0.0, 1.0]
    write_party_csv(tmp_path / "w.csv", y, s)
    d = load_party_csv(tmp_path / "w.csv")
    np.testing.assert_array_equal(d.y_true, y)
    np.testing.assert_array_equal(d.y_score, s)  # repr() round-trips floats exactly


# ----------------------------------------------------------------- encodings, line ends
def test_utf8_byte_order_mark(tmp_path: Path) -> None:
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbflabel,score\n1,0.8\n0,0.3\n")
    d = load_party_csv(p)
    assert d.y_true.tolist() == [1, 0] and d.y_score.tolist() == [0.8, 0.3]
    assert d.info is not None and "byte-order mark" in d.info.encoding


def test_crlf_line_ends(tmp_path: Path) -> None:
    p = tmp_path / "crlf.csv"
    p.write_bytes(b"label,score\r\n1,0.8\r\n0,0.3\r\n\r\n")
    assert load_party_csv(p).y_score.tolist() == [0.8, 0.3]
    p.write_bytes(b"label;score\r1;0,8\r0;0,3\r")  # classic Mac Excel: CR only
    assert load_party_csv(p).y_score.tolist() == [0.8, 0.3]


def test_excel_csv_utf8_semicolon_decimal_comma(tmp_path: Path) -> None:
    """Excel's 'CSV UTF-8' in a decimal-comma locale: BOM, CRLF, ';' and '0,75'."""
    p = tmp_path / "excel.csv"
    p.write_bytes("\ufeffPatient;Label;Score;Notiz\r\nA;1;0,75;größer\r\nB;0;0,125;\r\n"
                  "C;1;1;x\r\n".encode())
    d = load_party_csv(p)
    assert d.y_true.tolist() == [1, 0, 1]
    assert d.y_score.tolist() == [0.75, 0.125, 1.0]
    assert d.info is not None and d.info.delimiter == "semicolon"
    assert d.info.ignored_columns == ("Patient", "Notiz")


def test_excel_unicode_text_is_utf16_with_tabs(tmp_path: Path) -> None:
    p = tmp_path / "excel.txt"
    p.write_bytes("label\tscore\r\n1\t0.9\r\n0\t0.4\r\n".encode("utf-16"))
    d = load_party_csv(p)
    assert d.y_true.tolist() == [1, 0] and d.info is not None
    assert d.info.encoding == "UTF-16" and d.info.delimiter == "tab"
    assert d.name == "excel"


def test_comma_decimal_is_not_guessed_with_comma_delimiter(tmp_path: Path) -> None:
    p = write(tmp_path, 'label,score\n1,"0,75"\n')
    with pytest.raises(PartyFileError, match=r"row 2: score must be a number; got '0,75'"):
        load_party_csv(p)


def test_delimiter_can_be_forced(tmp_path: Path) -> None:
    p = write(tmp_path, "label;score;x,y\n1;0.5;a,b\n0;0.25;c,d\n")
    assert load_party_csv(p, delimiter=";").y_score.tolist() == [0.5, 0.25]
    with pytest.raises(ValueError, match="'delimiter' parameter of load_party_csv"):
        load_party_csv(p, delimiter="|")


def test_quoted_fields(tmp_path: Path) -> None:
    p = write(tmp_path, 'id,label,score\n"a, b",1,0.5\n"line\nbreak",0,"0.25"\n')
    d = load_party_csv(p)
    assert d.y_true.tolist() == [1, 0] and d.y_score.tolist() == [0.5, 0.25]


def test_non_utf8_bytes_in_score_column_name_row_and_byte(tmp_path: Path) -> None:
    p = tmp_path / "latin1.csv"
    p.write_bytes(b"label,score\n1,0.5\n0,0.2\xe9\n")
    with pytest.raises(PartyFileError) as info:
        load_party_csv(p)
    msg = str(info.value)
    assert str(p) in msg and "row 3:" in msg and "not valid UTF-8 (byte 0xe9)" in msg
    assert "CSV UTF-8" in msg


def test_non_utf8_bytes_in_label_column(tmp_path: Path) -> None:
    p = tmp_path / "latin1.csv"
    p.write_bytes(b"label,score\nb\xe9nin,0.5\n")
    with pytest.raises(PartyFileError, match=r"row 2: the label is not valid UTF-8"):
        load_party_csv(p, pos_label="x")


def test_non_utf8_bytes_in_an_ignored_column_are_tolerated(tmp_path: Path) -> None:
    """Excel's legacy 'CSV (comma delimited)' writes the code page in text columns."""
    p = tmp_path / "cp1252.csv"
    p.write_bytes("name,label,score\nJosé,1,0.5\nZoë,0,0.1\n".encode("cp1252"))
    d = load_party_csv(p)
    assert d.y_true.tolist() == [1, 0] and d.info is not None
    assert "not UTF-8 in ignored columns" in d.info.encoding


def test_broken_utf16(tmp_path: Path) -> None:
    p = tmp_path / "u16.csv"
    p.write_bytes(b"\xff\xfel\x00a\x00b")  # odd length
    with pytest.raises(PartyFileError, match="not valid UTF-16"):
        load_party_csv(p)


# ----------------------------------------------------------------- gzip
def test_gzip_by_extension_and_by_magic(tmp_path: Path) -> None:
    body = b"label,score\n1,0.9\n0,0.1\n"
    a = tmp_path / "site.csv.gz"
    a.write_bytes(gzip.compress(body))
    d = load_party_csv(a)
    assert d.name == "site" and d.y_true.tolist() == [1, 0]
    assert d.info is not None and d.info.compressed
    b = tmp_path / "renamed.csv"
    b.write_bytes(gzip.compress(b"\xef\xbb\xbf" + body))
    assert load_party_csv(b).y_score.tolist() == [0.9, 0.1]


def test_gzip_writer_round_trip(tmp_path: Path) -> None:
    write_party_csv(tmp_path / "w.csv.gz", [1, 0, 1], [0.5, 0.25, 1.0])
    assert (tmp_path / "w.csv.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert load_party_csv(tmp_path / "w.csv.gz").y_score.tolist() == [0.5, 0.25, 1.0]


def test_corrupt_gzip_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv.gz"
    p.write_bytes(gzip.compress(b"label,score\n1,0.5\n" * 100)[:40])
    with pytest.raises(PartyFileError, match=r"bad\.csv\.gz: not a valid gzip file"):
        load_party_csv(p)


# ----------------------------------------------------------------- columns
def test_any_column_order_and_extra_columns(tmp_path: Path) -> None:
    p = write(tmp_path, "id,score,site,label\n7,0.9,a,1\n8,0.2,b,0\n")
    d = load_party_csv(p)
    assert d.y_true.tolist() == [1, 0] and d.y_score.tolist() == [0.9, 0.2]
    assert d.info is not None and d.info.ignored_columns == ("id", "site")


def test_pandas_to_csv_with_its_index_column(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    p = tmp_path / "pandas.csv"
    pd.DataFrame({"label": [1, 0, 1], "score": [0.9, 0.1, 0.6]}).to_csv(p)
    assert p.read_text().startswith(",label,score")  # what pandas really writes
    d = load_party_csv(p)
    assert d.y_true.tolist() == [1, 0, 1] and d.y_score.tolist() == [0.9, 0.1, 0.6]
    # a boolean label column, as a pandas comparison makes it
    pd.DataFrame({"y": [True, False], "p": [0.8, 0.3]}).to_csv(p)
    d = load_party_csv(p, label_col="y", score_col="p")
    assert d.y_true.tolist() == [1, 0]


def test_pandas_format_without_pandas(tmp_path: Path) -> None:
    p = write(tmp_path, ",label,score\n0,1,0.9\n1,0,0.1\n")
    assert load_party_csv(p).y_true.tolist() == [1, 0]


def test_label_and_score_columns_by_name_or_position(tmp_path: Path) -> None:
    p = write(tmp_path, "y_true,prob,other\n1,0.9,5\n0,0.3,6\n")
    d = load_party_csv(p, label_col="Y_TRUE", score_col="prob")
    assert d.y_true.tolist() == [1, 0] and d.y_score.tolist() == [0.9, 0.3]
    d = load_party_csv(p, label_col=1, score_col="2")
    assert d.y_score.tolist() == [0.9, 0.3]


@pytest.mark.parametrize("text, kwargs, rule", [
    ("y,p\n0,0.1\n", {}, "no label column 'label' in the header 'y,p'; name the label column "
                         "with --label-col"),
    ("label,p\n0,0.1\n", {}, "no score column 'score'"),
    ("label\n0\n", {}, "is the delimiter right?"),
    ("label,score,label\n0,0.1,1\n", {}, "names 'label' 2 times"),
    ("label,score\n0,0.1\n", {"score_col": 5}, "--score-col 5 is not a column position"),
    ("label,score\n0,0.1\n", {"score_col": "label"}, "are the same column"),
])
def test_header_errors_name_row_1(tmp_path: Path, text: str, kwargs: dict[str, object],
                                  rule: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(PartyFileError) as info:
        load_party_csv(p, **kwargs)  # type: ignore[arg-type]
    assert f"{p}, row 1: " in str(info.value) and rule in str(info.value)


# ----------------------------------------------------------------- labels
@pytest.mark.parametrize("labels, expected", [
    (["0", "1", "1"], [0, 1, 1]),
    (["0.0", "1.0", "1"], [0, 1, 1]),
    (["True", "False", "TRUE"], [1, 0, 1]),
    (["false", "false"], [0, 0]),
    (["-1", "1", "+1"], [0, 1, 1]),
    (["-1", "-1.0"], [0, 0]),
    (["1"], [1]),
])
def test_label_conventions(tmp_path: Path, labels: list[str], expected: list[int]) -> None:
    p = write(tmp_path, "label,score\n" + "".join(f"{v},0.5\n" for v in labels))
    assert load_party_csv(p).y_true.tolist() == expected


def test_pos_label_for_any_two_values(tmp_path: Path) -> None:
    p = write(tmp_path, "label,score\nmalignant,0.9\nbenign,0.2\nmalignant,0.7\n")
    d = load_party_csv(p, pos_label="malignant")
    assert d.y_true.tolist() == [1, 0, 1]
    assert d.info is not None and d.info.label_values == {"malignant": 1, "benign": 0}
    assert load_party_csv(p, pos_label="benign").y_true.tolist() == [0, 1, 0]
    # a numeric pos_label matches however the number is written
    q = write(tmp_path, "label,score\n2.0,0.9\n3,0.2\n", "num.csv")
    assert load_party_csv(q, pos_label="2").y_true.tolist() == [1, 0]
    # with pos_label, a party may hold only negatives
    r = write(tmp_path, "label,score\nbenign,0.9\n", "neg.csv")
    assert load_party_csv(r, pos_label="malignant").y_true.tolist() == [0]


@pytest.mark.parametrize("text, kwargs, row, rule", [
    ("label,score\nyes,0.1\n", {}, 2, "label must be 0/1, True/False or -1/1; got 'yes'"),
    ("label,score\n0,0.1\n2,0.5\n", {}, 3, "label must be 0/1, True/False or -1/1; got '2'"),
    ("label,score\n0.5,0.1\n", {}, 2, "got '0.5'"),
    ("label,score\n0,0.1\n1,0.2\n-1,0.5\n", {}, 4, "label '-1' mixes label conventions"),
    ("label,score\nTrue,0.1\n0,0.2\n", {}, 3, "label '0' mixes label conventions"),
    ("label,score\na,0.1\nb,0.2\nc,0.3\n", {"pos_label": "a"}, 4,
     "a third label value 'c' (after 'a' and 'b')"),
    ("label,score\n,0.1\n", {}, 2, "label is empty"),
])
def test_bad_labels_name_row_and_rule(tmp_path: Path, text: str, kwargs: dict[str, str],
                                      row: int, rule: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(PartyFileError) as info:
        load_party_csv(p, **kwargs)  # type: ignore[arg-type]
    msg = str(info.value)
    assert f"{p}, row {row}: " in msg and rule in msg
    if not kwargs and "empty" not in rule:
        assert "--pos-label" in msg


def test_pos_label_matching_neither_value(tmp_path: Path) -> None:
    p = write(tmp_path, "label,score\nbenign,0.9\nmalignant,0.2\n")
    with pytest.raises(PartyFileError, match=r"--pos-label 'Malignant' matches neither label "
                                             r"value in the file \('benign', row 2; "
                                             r"'malignant', row 3\)"):
        load_party_csv(p, pos_label="Malignant")


# ----------------------------------------------------------------- scores
def test_scores_a_rounding_hair_outside_are_clipped(tmp_path: Path) -> None:
    p = write(tmp_path, "label,score\n1,1.0000000000000002\n0,-1e-12\n1,0.5\n")
    d = load_party_csv(p)
    assert d.y_score.tolist() == [1.0, 0.0, 0.5]
    assert d.info is not None and d.info.clipped_scores == 2


def test_score_range_none_accepts_any_finite_score(tmp_path: Path) -> None:
    p = write(tmp_path, "label,score\n1,3.5\n0,-2\n")
    assert load_party_csv(p, score_range=None).y_score.tolist() == [3.5, -2.0]
    with pytest.raises(PartyFileError, match=r"row 2: score must be in \[0, 1\]; got 3.5"):
        load_party_csv(p)
    with pytest.raises(ValueError, match="'score_tolerance' parameter"):
        load_party_csv(p, score_tolerance=-1.0)


@pytest.mark.parametrize("text, row, rule", [
    ("label,score\n0,0.1\n1\n", 3, "expected 2 columns as in the header; got 1"),
    ("label,score\n0,0.1\n1,0.2,0.3\n", 3, "expected 2 columns as in the header; got 3"),
    ("label,score\n1,abc\n", 2, "score must be a number"),
    ("label,score\n1,\n", 2, "score must be a number"),
    ("label,score\n0,0.2\n1,nan\n", 3, "score must be finite"),
    ("label,score\n1,inf\n", 2, "score must be finite"),
    ("label,score\n1,-inf\n", 2, "score must be finite"),
    ("label,score\n1,1.5\n", 2, "score must be in [0, 1]"),
    ("label,score\n1,1.000001\n", 2, "scores within 1e-09 of the range are clipped"),
    ("label,score\n1,-0.01\n", 2, "score must be in [0, 1]"),
    ("label,score\n0,0.1\n\n\n1,7\n", 5, "score must be in [0, 1]"),
])
def test_bad_rows_name_file_row_and_rule(tmp_path: Path, text: str, row: int,
                                         rule: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(PartyFileError) as info:
        load_party_csv(p)
    msg = str(info.value)
    assert str(p) in msg
    assert f"row {row}:" in msg
    assert rule in msg


def test_trailing_empty_fields_are_tolerated(tmp_path: Path) -> None:
    p = write(tmp_path, "label;score\r\n1;0,5;;\r\n0;0,25;\r\n")
    assert load_party_csv(p).y_score.tolist() == [0.5, 0.25]


@pytest.mark.parametrize("text, rule", [
    ("", "file is empty"),
    ("\n\n", "file is empty"),
    ("label,score\n", "no data rows"),
    ("label,score\n\n\n", "no data rows"),
])
def test_empty_files_name_the_file(tmp_path: Path, text: str, rule: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(PartyFileError) as info:
        load_party_csv(p)
    assert str(p) in str(info.value) and rule in str(info.value)


def test_party_file_error_is_a_value_error() -> None:
    assert issubclass(PartyFileError, ValueError)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        load_party_csv(tmp_path / "nope.csv")
    with pytest.raises(IsADirectoryError, match=str(tmp_path)):
        load_party_csv(tmp_path)


# ----------------------------------------------------------------- several parties, names
def test_load_many_requires_both_classes_overall(tmp_path: Path) -> None:
    a = write(tmp_path, "label,score\n1,0.2\n", "a.csv")
    b = write(tmp_path, "label,score\n1,0.7\n1,0.1\n", "b.csv")
    with pytest.raises(UndefinedMetricError, match="all 3 samples across 2 party file"):
        load_party_csvs([a, b])
    assert len(load_party_csvs([a, b], require_both_classes=False)) == 2
    c = write(tmp_path, "label,score\n0,0.5\n", "c.csv")
    parties = load_party_csvs([a, b, c])
    assert [p.name for p in parties] == ["a", "b", "c"]
    with pytest.raises(ValueError):
        load_party_csvs([])


def test_load_many_reports_the_bad_file(tmp_path: Path) -> None:
    a = write(tmp_path, "label,score\n1,0.2\n0,0.1\n", "a.csv")
    b = write(tmp_path, "label,score\n1,0.7\n3,0.1\n", "b.csv")
    with pytest.raises(PartyFileError, match=r"b\.csv, row 3: label must be 0/1"):
        load_party_csvs([a, b])


def test_same_file_name_in_different_directories_gets_unique_names(tmp_path: Path) -> None:
    text = "label,score\n1,0.2\n0,0.1\n"
    paths = [write(tmp_path, text, f"{site}/scores.csv") for site in ("site-a", "site-b")]
    paths.append(write(tmp_path, text, "x/site-a/scores.csv.gz"))
    paths.append(write(tmp_path, text, "other.csv"))
    assert [p.name for p in load_party_csvs(paths[:2])] == ["site-a/scores", "site-b/scores"]
    names = [p.name for p in load_party_csvs(paths)]
    # 'site-a/scores' twice: those two take one more directory each, the others stay short
    assert names[1:] == ["site-b/scores", "x/site-a/scores", "other"]
    assert names[0] == f"{tmp_path.name}/site-a/scores"
    assert len(set(names)) == len(names)


def test_party_names_are_roster_names(tmp_path: Path) -> None:
    from fedsec.crypto.identity import check_party_name

    names = party_names([tmp_path / "St. Mary's hospital.csv", tmp_path / "a|b.csv",
                         tmp_path / "Zürich.csv", tmp_path / ("x" * 80 + ".csv")])
    assert names[:3] == ["St._Mary's_hospital", "a_b", "Z_rich"]
    for n in names:
        assert check_party_name(n) == n


def test_explicit_names(tmp_path: Path) -> None:
    a = write(tmp_path, "label,score\n1,0.2\n", "a/scores.csv")
    b = write(tmp_path, "label,score\n0,0.1\n", "b/scores.csv")
    parties = load_party_csvs([a, b], names=["hospital-a", "hospital-b"])
    assert [p.name for p in parties] == ["hospital-a", "hospital-b"]
    with pytest.raises(ValueError, match="1 names \\(--name\\) for 2 party files"):
        load_party_csvs([a, b], names=["x"])
    with pytest.raises(ValueError, match="'x' is given more than once"):
        load_party_csvs([a, b], names=["x", "x"])
    with pytest.raises(ValueError, match="--name: a party name must be"):
        load_party_csvs([a, b], names=["x y", "z"])


def test_same_file_twice_is_refused(tmp_path: Path) -> None:
    a = write(tmp_path, "label,score\n1,0.2\n0,0.3\n", "a.csv")
    with pytest.raises(ValueError, match="the same file is given twice"):
        load_party_csvs([a, tmp_path / "." / "a.csv"])


def test_oversized_field_names_the_row(tmp_path: Path) -> None:
    p = write(tmp_path, "label,score\n1,0.5\n0," + "9" * 200_000 + "\n")
    with pytest.raises(PartyFileError, match=r"row 3: not valid CSV"):
        load_party_csv(p)


_SNIPPETS = [b"label", b"score", b",", b";", b"\t", b"\n", b"\r\n", b"0", b"1", b"-1",
             b"0.5", b"1e-9", b"True", b'"', b"\xef\xbb\xbf", b"\xff\xfe", b"\x1f\x8b",
             b"\xe9", b"\x00", b"nan", b"inf", b" "]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(_SNIPPETS), st.binary(max_size=6)), max_size=40),
       st.sampled_from([None, "1", "a"]))
def test_any_bytes_load_or_raise_a_party_file_error(tmp_path: Path, chunks: list[bytes],
                                                    pos_label: str | None) -> None:
    """Whatever a party file holds, the loader returns valid data or raises
    PartyFileError -- never another exception (UnicodeDecodeError, csv.Error, ...)."""
    p = tmp_path / "fuzz.csv"
    p.write_bytes(b"".join(chunks))
    try:
        d = load_party_csv(p, pos_label=pos_label)
    except PartyFileError as exc:
        assert str(p) in str(exc)
        return
    assert d.n_samples >= 1 and set(np.unique(d.y_true)) <= {0, 1}
    assert np.all((d.y_score >= 0) & (d.y_score <= 1))
