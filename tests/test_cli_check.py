"""``fedsec check``: per-file checks, the federation-level summary, and spreadsheets
refused with a way out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsec.cli import main
from fedsec.data.io import write_party_csv


def _files(tmp_path: Path, *parties: tuple[list[int], list[float]]) -> list[str]:
    out = []
    for i, (y, s) in enumerate(parties):
        path = tmp_path / f"party{i}.csv"
        write_party_csv(path, y, s)
        out.append(str(path))
    return out


def test_federation_summary_accepts_what_auc_accepts(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    files = _files(tmp_path, ([0, 1, 1], [0.1, 0.8, 0.6]), ([1, 0], [0.7, 0.2]))
    assert main(["check", *files]) == 0
    out = capsys.readouterr().out
    assert "federation: 2 parties, 5 samples of the 1,048,576 (2^20)" in out
    assert "3 positive / 2 negative" in out and "fedsec auc accepts" in out
    assert main(["check", "--json", *files]) == 0
    doc = json.loads(capsys.readouterr().out)
    fed = doc["federation"]
    assert doc["ok"] and fed["ok"] and fed["samples"] == 5 and fed["positives"] == 3


def test_the_limit_is_the_protocols_own() -> None:
    from fedsec.auc.common import DEFAULT_MAX_TOTAL_SAMPLES
    from fedsec.auc.fhauc import FHAUCConfig
    from fedsec.auc.fhauc_malicious import MaliciousConfig

    assert DEFAULT_MAX_TOTAL_SAMPLES == 1 << 20
    assert FHAUCConfig.create(10).max_total_samples == DEFAULT_MAX_TOTAL_SAMPLES
    assert MaliciousConfig.create(10).max_total_samples == DEFAULT_MAX_TOTAL_SAMPLES


def test_one_class_in_the_federation_fails_as_auc_does(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    files = _files(tmp_path, ([1, 1], [0.1, 0.8]), ([1], [0.7]))
    assert main(["check", *files]) == 5
    out = capsys.readouterr().out
    assert "REFUSED by fedsec auc: the federation holds one class only" in out
    assert main(["auc", "-q", *files]) == 5  # what auc does with the same files
    capsys.readouterr()
    # one party's file on its own is no federation: per-file checks only, success
    assert main(["check", files[0]]) == 0
    assert "per-file checks only" in capsys.readouterr().out


def test_too_many_samples_in_all_fails_as_auc_does(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # every file is within the limit, the federation is not (limit lowered: the same
    # constant is read by both commands)
    import fedsec.auc.common

    monkeypatch.setattr(fedsec.auc.common, "DEFAULT_MAX_TOTAL_SAMPLES", 6)
    files = _files(tmp_path, ([0, 1, 1, 0], [0.1, 0.8, 0.6, 0.3]),
                   ([1, 0, 0], [0.7, 0.2, 0.4]))
    assert main(["check", *files]) == 2
    out = capsys.readouterr().out
    assert "party0.csv: OK" in out and "party1.csv: OK" in out
    assert "REFUSED by fedsec auc: the federation holds 7 samples, more than the 6" in out
    assert main(["auc", "-q", *files]) == 2
    assert "7 samples" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "head", "kind"), [
    ("book.xlsx", b"PK\x03\x04\x14\x00\x06\x00", "Excel workbook"),
    ("book.csv", b"PK\x03\x04\x14\x00\x06\x00", "zip archive"),
    ("old.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "Excel 97-2003"),
    ("old.csv", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "OLE2"),
    ("table.parquet", b"PAR1\x15\x04", "Parquet"),
    ("table.csv", b"PAR1\x15\x04", "Parquet"),
    ("sheet.ods", b"PK\x03\x04", "OpenDocument"),
])
def test_spreadsheets_are_refused_with_save_as_csv(tmp_path: Path, name: str, head: bytes,
                                                   kind: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / name
    path.write_bytes(head + bytes(range(256)) * 4)
    good = _files(tmp_path, ([0, 1], [0.2, 0.9]))[0]
    assert main(["check", str(path), good]) == 2
    out = capsys.readouterr().out
    assert f"{name}: INVALID" in out and kind in out and "save it as CSV" in out
    assert "\\x" not in out and "\x00" not in out and "PK\x03" not in out
    assert main(["auc", "-q", str(path), good]) == 2
    err = capsys.readouterr().err
    assert "save it as CSV" in err and "\x00" not in err
