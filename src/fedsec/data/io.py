"""Reading one CSV file per party: labels and model scores, as users' tools write them.

A party file is a table with a header row. fedsec reads two of its columns -- the label and
the model's score -- and ignores every other column, in any order:

* **Columns**: ``label`` and ``score`` by default (names compared without case or
  surrounding spaces); ``label_col`` / ``score_col`` (``--label-col`` / ``--score-col``)
  name other columns, or give their 1-based position. Extra columns, such as the unnamed
  index column pandas' ``DataFrame.to_csv`` writes, are ignored.
* **Labels**: ``0/1`` (also ``0.0/1.0``), ``True/False`` (any case) or ``-1/1`` (``+1``),
  read as negative/positive; any two other values (``benign``/``malignant``, ``yes``/``no``)
  with ``pos_label`` (``--pos-label``) naming the positive one. A file whose labels mix two
  of these conventions (``-1, 0, 1``) or hold a third value is refused.
* **Scores**: finite numbers in ``[0, 1]``. A score outside by at most ``score_tolerance``
  (default ``1e-9``: float rounding, e.g. ``1.0000000000000002``) is clipped into the range
  and counted; anything further out is refused. ``score_range=None`` accepts any finite score
  (for callers that map real-valued scores into ``[0, 1]`` themselves).
* **Encoding**: UTF-8, with or without a byte-order mark (Excel's "CSV UTF-8"), or UTF-16
  with a byte-order mark (Excel's "Unicode Text"). Anything else is refused with the row and
  byte that do not decode. Line ends ``\\n`` or ``\\r\\n``.
* **Compression**: gzip (``.csv.gz``, recognised by its magic bytes, whatever the name).
* **Delimiter**: detected from the header row -- comma, semicolon or tab, whichever splits
  the header into the most fields (ties: comma first); ``delimiter`` (``--delimiter``) forces
  one. Excel in locales with a decimal comma writes ``;``-separated files with scores such as
  ``0,75``: with a semicolon or tab delimiter a score with one decimal comma and no point is
  read as a decimal number. Quoted fields follow the usual CSV rules.
* Blank rows are skipped; a file needs at least one data row. A party holding one class only
  is valid (the federation as a whole needs both).

Every error is a :class:`PartyFileError` (a ``ValueError``) whose message names the file,
the row (1-based, the header is row 1) and the rule.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import math
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedsec.errors import UndefinedMetricError

__all__ = [
    "PartyData",
    "PartyFileError",
    "PartyFileInfo",
    "load_party_csv",
    "load_party_csvs",
    "party_names",
    "write_party_csv",
    "DEFAULT_SCORE_TOLERANCE",
    "MAX_PARTY_FILE_BYTES",
]

#: Scores outside [0, 1] by at most this much are float rounding and are clipped.
DEFAULT_SCORE_TOLERANCE = 1e-9
#: Largest party file read (after decompression): 2 GiB, far above the 2^20 samples the
#: secure AUC's CKKS parameters are sized for (about 40 MB of ``label,score`` rows).
MAX_PARTY_FILE_BYTES = 1 << 31
_DELIMITERS = (",", ";", "\t")
_DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab"}
_TRUE = {"true"}
_FALSE = {"false"}
_DECIMAL_COMMA = re.compile(r"^[+-]?\d*,\d+(?:[eE][+-]?\d+)?$")


class PartyFileError(ValueError):
    """A party file breaks a rule; the message names the file, the row and the rule."""


@dataclass(frozen=True)
class PartyFileInfo:
    """How a party file was read (what ``fedsec check`` prints)."""

    path: str
    encoding: str
    compressed: bool
    delimiter: str
    label_column: str
    score_column: str
    label_values: dict[str, int]
    clipped_scores: int
    ignored_columns: tuple[str, ...]


@dataclass(frozen=True)
class PartyData:
    """One party's private test labels (0/1) and model scores."""

    name: str
    y_true: NDArray[np.int64]
    y_score: NDArray[np.float64]
    info: PartyFileInfo | None = field(default=None, compare=False, repr=False)

    @property
    def n_samples(self) -> int:
        return int(self.y_true.size)

    @property
    def n_positives(self) -> int:
        return int(self.y_true.sum())


# ------------------------------------------------------------------------- reading text
#: Formats that are not text, by extension and by their first bytes (magic numbers).
_NOT_CSV_EXTENSIONS = {".xlsx": "an Excel workbook", ".xlsm": "an Excel workbook",
                       ".xls": "an Excel 97-2003 workbook", ".ods": "an OpenDocument spreadsheet",
                       ".parquet": "a Parquet file", ".numbers": "a Numbers spreadsheet"}
_NOT_CSV_MAGIC = ((b"PK\x03\x04", "a zip archive (an Excel .xlsx or OpenDocument .ods "
                                  "workbook?)"),
                  (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an OLE2 file (an Excel 97-2003 "
                                                    ".xls workbook?)"),
                  (b"PAR1", "a Parquet file"))


def _refuse_binary(p: str, head: bytes) -> None:
    """Refuse spreadsheets and columnar files by extension or magic bytes, saying how to
    save them as CSV (instead of printing their binary header as a CSV row)."""
    what = None
    lower = p.lower()
    for ext, kind in _NOT_CSV_EXTENSIONS.items():
        if lower.endswith((ext, ext + ".gz")):
            what = kind
    for magic, kind in _NOT_CSV_MAGIC:
        if head.startswith(magic):
            what = what or kind
    if what is not None:
        raise PartyFileError(
            f"{p}: {what}, not a CSV file; save it as CSV (Excel or LibreOffice: File > "
            "Save As > 'CSV UTF-8'; pandas: pd.read_excel(path).to_csv(out, index=False) "
            "or pd.read_parquet(path).to_csv(out, index=False))")


def _read_bytes(p: str) -> tuple[bytes, bool]:
    if not os.path.exists(p):
        raise FileNotFoundError(f"{p}: no such file")
    if os.path.isdir(p):
        raise IsADirectoryError(f"{p}: is a directory, expected a CSV file")
    with open(p, "rb") as fh:
        _refuse_binary(p, fh.read(8))
        fh.seek(0)
        raw = fh.read(MAX_PARTY_FILE_BYTES + 1)
    compressed = raw[:2] == b"\x1f\x8b"
    if compressed:
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
                raw = gz.read(MAX_PARTY_FILE_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise PartyFileError(f"{p}: not a valid gzip file ({exc})") from None
    if len(raw) > MAX_PARTY_FILE_BYTES:
        raise PartyFileError(f"{p}: larger than {MAX_PARTY_FILE_BYTES >> 30} GiB "
                             "(fedsec.data.io.MAX_PARTY_FILE_BYTES); split the party's data")
    if compressed:
        _refuse_binary(p, raw[:8])
    return raw, compressed


def _decode(p: str, raw: bytes) -> tuple[str, str]:
    if raw.startswith(codecs.BOM_UTF8):
        encoding, label, body = "utf-8", "UTF-8 with byte-order mark", raw[3:]
    elif raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding, label, body = "utf-16", "UTF-16", raw
    else:
        encoding, label, body = "utf-8", "UTF-8", raw
    try:
        return body.decode(encoding), label
    except UnicodeDecodeError as exc:
        if encoding == "utf-16":
            raise PartyFileError(f"{p}: not valid UTF-16 text ({exc.reason}); save the file "
                                 "as 'CSV UTF-8'") from None
    # Bytes that are not UTF-8 (a spreadsheet's legacy code page) are tolerated in columns
    # fedsec ignores; in the label and score columns they are an error (_check_text).
    return body.decode("utf-8", errors="surrogateescape"), label + " (bytes that are not " \
        "UTF-8 in ignored columns)"


def _check_text(p: str, row: int, what: str, value: str) -> None:
    bad = next((c for c in value if "\udc80" <= c <= "\udcff"), None)
    if bad is not None:
        raise PartyFileError(
            f"{p}, row {row}: the {what} is not valid UTF-8 (byte 0x{ord(bad) - 0xdc00:02x}); "
            "party files must be UTF-8 -- in Excel save as 'CSV UTF-8', in pandas use "
            "to_csv(..., encoding='utf-8')")


def _pick_delimiter(first_line: str) -> str:
    best, best_n = ",", 1
    for d in _DELIMITERS:
        try:
            n = len(next(csv.reader([first_line], delimiter=d), []))
        except csv.Error:  # the real reader reports it, with the row
            continue
        if n > best_n:
            best, best_n = d, n
    return best


# ------------------------------------------------------------------------- columns
def _find_column(p: str, header: list[str], wanted: str | int, what: str,
                 option: str) -> int:
    cols = [h.strip().lower() for h in header]
    if isinstance(wanted, int) or (isinstance(wanted, str) and wanted.strip().isdigit()
                                   and wanted.strip().lower() not in cols):
        idx = int(wanted) - 1
        if not 0 <= idx < len(header):
            raise PartyFileError(f"{p}, row 1: {option} {wanted} is not a column position "
                                 f"(the header has {len(header)} columns)")
        return idx
    key = str(wanted).strip().lower()
    hits = [i for i, c in enumerate(cols) if c == key]
    if len(hits) > 1:
        raise PartyFileError(f"{p}, row 1: the header names {key!r} {len(hits)} times; "
                             f"rename the columns or give {option} as a column position")
    if not hits:
        shown = ",".join(h.strip() for h in header)
        hint = (f"name the {what} column with {option}" if len(header) > 1 else
                "the header has one column: is the delimiter right? (--delimiter)")
        raise PartyFileError(f"{p}, row 1: no {what} column {key!r} in the header "
                             f"{shown!r}; {hint}")
    return hits[0]


# ------------------------------------------------------------------------- values
def _number(text: str, decimal_comma: bool) -> float:
    if decimal_comma and _DECIMAL_COMMA.match(text):
        text = text.replace(",", ".")
    return float(text)


def _label_token(text: str) -> str | float:
    low = text.strip().lower()
    if low in _TRUE or low in _FALSE:
        return low
    try:
        return float(low)
    except ValueError:
        return text.strip()


_CONVENTIONS: tuple[tuple[str, dict[str | float, int]], ...] = (
    ("0/1", {0.0: 0, 1.0: 1}),
    ("True/False", {"false": 0, "true": 1}),
    ("-1/1", {-1.0: 0, 1.0: 1}),
)


def _map_labels(p: str, raw: list[str], rows: list[int], pos_label: str | None
                ) -> tuple[NDArray[np.int64], dict[str, int]]:
    tokens = [_label_token(t) for t in raw]
    first_row: dict[str | float, int] = {}
    first_text: dict[str | float, str] = {}
    for tok, text, row in zip(tokens, raw, rows, strict=True):
        if tok not in first_row:
            first_row[tok] = row
            first_text[tok] = text.strip()
    if pos_label is not None:
        pos = _label_token(pos_label)
        values = list(first_row)
        if len(values) > 2:
            third = values[2]
            raise PartyFileError(
                f"{p}, row {first_row[third]}: a third label value {first_text[third]!r} "
                f"(after {first_text[values[0]]!r} and {first_text[values[1]]!r}); labels "
                "must take two values")
        if len(values) == 2 and pos not in values:
            raise PartyFileError(
                f"{p}: --pos-label {pos_label!r} matches neither label value in the file "
                f"({first_text[values[0]]!r}, row {first_row[values[0]]}; "
                f"{first_text[values[1]]!r}, row {first_row[values[1]]})")
        mapping = {tok: int(tok == pos) for tok in values}
        y = np.fromiter((mapping[t] for t in tokens), dtype=np.int64, count=len(tokens))
        return y, {first_text[t]: v for t, v in mapping.items()}
    for _name, conv in _CONVENTIONS:
        if all(t in conv for t in first_row):
            y = np.fromiter((conv[t] for t in tokens), dtype=np.int64, count=len(tokens))
            return y, {first_text[t]: conv[t] for t in first_row}
    # Say which value breaks every convention, at the first row where that shows.
    for tok, row in sorted(first_row.items(), key=lambda kv: kv[1]):
        seen = {t for t, r in first_row.items() if r <= row}
        if not any(all(t in conv for t in seen) for _n, conv in _CONVENTIONS):
            known = [t for t in seen if t != tok]
            mixed = any(tok in conv for _n, conv in _CONVENTIONS)
            if mixed:
                why = (f"label {first_text[tok]!r} mixes label conventions with "
                       f"{', '.join(repr(first_text[t]) for t in known)}")
            else:
                why = f"label must be 0/1, True/False or -1/1; got {first_text[tok]!r}"
            raise PartyFileError(
                f"{p}, row {row}: {why} (for other labels name the positive one with "
                "--pos-label)")
    raise AssertionError("unreachable")  # pragma: no cover


# ------------------------------------------------------------------------- the loader
def _csv_rows(p: str, reader: Any) -> Iterator[list[str]]:
    """The reader's rows; a CSV syntax error (e.g. a field over the csv module's size
    limit) becomes a :class:`PartyFileError` naming the row."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise PartyFileError(f"{p}, row {reader.line_num}: not valid CSV ({exc})") from None
        yield row


def load_party_csv(
    path: str | os.PathLike[str], *, name: str | None = None,
    label_col: str | int = "label", score_col: str | int = "score",
    pos_label: str | None = None, delimiter: str | None = None,
    score_range: tuple[float, float] | None = (0.0, 1.0),
    score_tolerance: float = DEFAULT_SCORE_TOLERANCE,
) -> PartyData:
    """Load and validate one party file (the rules are in the module docstring).

    Parameters
    ----------
    path : path-like
        The CSV file, optionally gzip-compressed.
    name : str, optional
        The party's name; default: the file name without ``.gz`` and ``.csv``.
    label_col, score_col : str or int, default="label", "score"
        Column names (case-insensitive) or 1-based positions.
    pos_label : str, optional
        The label value that means positive; every other value is negative (at most two
        values in the file).
    delimiter : {",", ";", "\\t"}, optional
        Forces the field delimiter; default: detected from the header row.
    score_range : (float, float) or None, default=(0.0, 1.0)
        Allowed score range; ``None`` accepts any finite score.
    score_tolerance : float, default=1e-9
        Scores outside ``score_range`` by at most this much are clipped into it.

    Raises
    ------
    PartyFileError
        The file breaks a rule; the message names the file, the row and the rule.
    FileNotFoundError, IsADirectoryError
        No such file, or a directory.
    """
    p = os.fspath(path)
    if delimiter is not None and delimiter not in _DELIMITERS:
        raise ValueError(f"The 'delimiter' parameter of load_party_csv must be one of "
                         f"{list(_DELIMITERS)}. Got {delimiter!r} instead.")
    if not (isinstance(score_tolerance, (int, float)) and math.isfinite(score_tolerance)
            and score_tolerance >= 0):
        raise ValueError(f"The 'score_tolerance' parameter of load_party_csv must be a "
                         f"finite number >= 0. Got {score_tolerance!r} instead.")
    raw, compressed = _read_bytes(p)
    text, encoding = _decode(p, raw)
    first_line = next((ln for ln in io.StringIO(text, newline="") if ln.strip()), None)
    if first_line is None:
        raise PartyFileError(f"{p}: file is empty; expected a header row naming the "
                             "label and score columns (e.g. 'label,score')")
    delim = delimiter if delimiter is not None else _pick_delimiter(first_line.rstrip("\r\n"))
    decimal_comma = delim != ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim, strict=False)
    rows_in = _csv_rows(p, reader)
    header: list[str] = []
    for header in rows_in:
        if header and any(c.strip() for c in header):
            break
    li = _find_column(p, header, label_col, "label", "--label-col")
    si = _find_column(p, header, score_col, "score", "--score-col")
    if li == si:
        raise PartyFileError(f"{p}, row 1: the label and score columns are the same "
                             f"column ({header[li].strip()!r})")
    width = len(header)
    labels: list[str] = []
    rows: list[int] = []
    scores: list[float] = []
    clipped = 0
    lo, hi = score_range if score_range is not None else (-math.inf, math.inf)
    for row in rows_in:
        line = reader.line_num
        if not row or all(not c.strip() for c in row):
            continue  # blank lines are allowed
        if len(row) > width and any(c.strip() for c in row[width:]):
            raise PartyFileError(f"{p}, row {line}: expected {width} columns as in the "
                                 f"header; got {len(row)}")
        if len(row) <= max(li, si):
            raise PartyFileError(f"{p}, row {line}: expected {width} columns as in the "
                                 f"header; got {len(row)}")
        lab_s, sc_s = row[li].strip(), row[si].strip()
        _check_text(p, line, "label", lab_s)
        _check_text(p, line, "score", sc_s)
        if not lab_s:
            raise PartyFileError(f"{p}, row {line}: label is empty")
        try:
            sc = _number(sc_s, decimal_comma)
        except ValueError:
            raise PartyFileError(
                f"{p}, row {line}: score must be a number; got {sc_s!r}") from None
        if not math.isfinite(sc):
            raise PartyFileError(f"{p}, row {line}: score must be finite; got {sc_s!r}")
        if sc < lo or sc > hi:
            if lo - score_tolerance <= sc <= hi + score_tolerance:
                sc = min(max(sc, lo), hi)
                clipped += 1
            else:
                raise PartyFileError(
                    f"{p}, row {line}: score must be in [{lo:g}, {hi:g}]; got {sc_s} (scores "
                    f"within {score_tolerance:g} of the range are clipped; declare other scores "
                    "with --scores logit or --scores range:LO:HI (API: scores=...), or map "
                    "them into the range first)")
        labels.append(lab_s)
        rows.append(line)
        scores.append(sc)
    if not labels:
        raise PartyFileError(f"{p}: no data rows after the header")
    y, label_values = _map_labels(p, labels, rows, pos_label)
    info = PartyFileInfo(
        path=p, encoding=encoding, compressed=compressed,
        delimiter=_DELIMITER_NAMES[delim], label_column=header[li].strip(),
        score_column=header[si].strip(), label_values=label_values, clipped_scores=clipped,
        ignored_columns=tuple(h.strip() for i, h in enumerate(header) if i not in (li, si)),
    )
    return PartyData(
        name=name if name is not None else _default_name(p),
        y_true=y,
        y_score=np.asarray(scores, dtype=np.float64),
        info=info,
    )


# ------------------------------------------------------------------------- names
_UNSAFE = re.compile(r"[^\x21-\x7e]|\|")
_MAX_NAME = 64


def _stem(base: str) -> str:
    low = base.lower()
    for ext in (".gz",):
        if low.endswith(ext):
            base, low = base[:-len(ext)], low[:-len(ext)]
    for ext in (".csv", ".tsv", ".txt"):
        if low.endswith(ext) and len(base) > len(ext):
            return base[:-len(ext)]
    return base


def _safe(name: str) -> str:
    cleaned = _UNSAFE.sub("_", name) or "party"
    return cleaned[-_MAX_NAME:]


def _default_name(p: str) -> str:
    return _safe(_stem(os.path.basename(os.path.normpath(p))))


def party_names(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Default party names for these files: unique, and valid roster names.

    A party is named after its file without ``.csv`` / ``.gz`` (``hospital-a.csv`` ->
    ``hospital-a``). Where two files share a name (``site-a/scores.csv`` and
    ``site-b/scores.csv``), as many parent directories are prefixed as it takes to tell them
    apart (``site-a/scores``, ``site-b/scores``). Characters a roster name cannot hold
    (spaces, ``|``, non-ASCII) become ``_``.

    Raises
    ------
    ValueError
        If one file is given twice, or the names cannot be told apart.
    """
    norm = [os.path.normpath(os.path.abspath(os.fspath(p))) for p in paths]
    seen: dict[str, int] = {}
    for i, n in enumerate(norm):
        if n in seen:
            raise ValueError(f"{os.fspath(paths[i])}: the same file is given twice "
                             f"(as party {seen[n] + 1} and party {i + 1})")
        seen[n] = i
    parts = [n.split(os.sep) for n in norm]
    depth = [1] * len(parts)
    while True:
        names = [_safe("/".join(pp[-d:-1] + [_stem(pp[-1])]))
                 for pp, d in zip(parts, depth, strict=True)]
        groups: dict[str, list[int]] = {}
        for i, nm in enumerate(names):
            groups.setdefault(nm, []).append(i)
        clashes = [ix for ix in groups.values() if len(ix) > 1]
        if not clashes:
            return names
        grew = False
        for ix in clashes:
            for i in ix:
                if depth[i] < len(parts[i]):
                    depth[i] += 1
                    grew = True
        if not grew:
            i, j = clashes[0][:2]
            raise ValueError(f"{os.fspath(paths[i])} and {os.fspath(paths[j])} would both be "
                             f"named {names[i]!r}; name the parties with --name")


def load_party_csvs(paths: Sequence[str | os.PathLike[str]], *,
                    names: Sequence[str] | None = None, label_col: str | int = "label",
                    score_col: str | int = "score", pos_label: str | None = None,
                    delimiter: str | None = None,
                    score_range: tuple[float, float] | None = (0.0, 1.0),
                    score_tolerance: float = DEFAULT_SCORE_TOLERANCE,
                    require_both_classes: bool = True) -> list[PartyData]:
    """Load several party files, name them uniquely and check that the federation has both
    classes.

    Parameters
    ----------
    paths : sequence of path-like
        One file per party.
    names : sequence of str, optional
        One unique roster-valid name per file; default :func:`party_names`.
    label_col, score_col, pos_label, delimiter, score_range, score_tolerance
        As in :func:`load_party_csv`; they apply to every file.
    require_both_classes : bool, default=True
        Raise :class:`UndefinedMetricError` when the whole federation holds one class.

    Raises
    ------
    PartyFileError, FileNotFoundError, IsADirectoryError
        A file breaks a rule (the message names the file, the row and the rule).
    ValueError
        No files, or names that are missing, duplicated or not valid roster names.
    UndefinedMetricError
        Every sample of the federation is of one class (with ``require_both_classes``).
    """
    if not paths:
        raise ValueError("at least one party file is required")
    if names is None:
        chosen = party_names(paths)
    else:
        chosen = list(names)
        if len(chosen) != len(paths):
            raise ValueError(f"{len(chosen)} names (--name) for {len(paths)} party files; "
                             "give one --name per file, in the same order")
        from fedsec.crypto.identity import check_party_name

        dup = {n for n in chosen if chosen.count(n) > 1}
        if dup:
            raise ValueError(f"party names must be unique; {sorted(dup)[0]!r} is given "
                             "more than once (--name)")
        for n in chosen:
            try:
                check_party_name(n)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"--name: {exc}") from None
    parties = [load_party_csv(p, name=n, label_col=label_col, score_col=score_col,
                              pos_label=pos_label, delimiter=delimiter,
                              score_range=score_range, score_tolerance=score_tolerance)
               for p, n in zip(paths, chosen, strict=True)]
    if require_both_classes:
        pos = sum(d.n_positives for d in parties)
        total = sum(d.n_samples for d in parties)
        if pos == 0 or pos == total:
            only = "positive" if pos else "negative"
            raise UndefinedMetricError(
                f"AUC is undefined: all {total} samples across {len(parties)} party file(s) "
                f"are {only}; the federation needs both classes.")
    return parties


def write_party_csv(path: str | os.PathLike[str], y_true: Sequence[int] | NDArray[np.int64],
                    y_score: Sequence[float] | NDArray[np.float64]) -> None:
    """Write a party file in the format :func:`load_party_csv` reads (gzip for ``.gz``)."""
    rows = ["label,score\n"] + [f"{int(lab)},{float(sc)!r}\n"
                                for lab, sc in zip(y_true, y_score, strict=True)]
    data = "".join(rows).encode("utf-8")
    if os.fspath(path).lower().endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    with open(path, "wb") as fh:
        fh.write(data)
