"""Reading one CSV per party: header ``label,score``, label 0/1, score in [0, 1]."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedsec.errors import UndefinedMetricError

__all__ = ["PartyData", "PartyFileError", "load_party_csv", "load_party_csvs"]


class PartyFileError(ValueError):
    """A party file breaks a rule; the message names the file, the row and the rule."""


@dataclass(frozen=True)
class PartyData:
    """One party's private test labels and model scores."""

    name: str
    y_true: NDArray[np.int64]
    y_score: NDArray[np.float64]

    @property
    def n_samples(self) -> int:
        return int(self.y_true.size)


def load_party_csv(path: str | os.PathLike[str]) -> PartyData:
    """Load and validate one party file.

    Rules: the header is exactly ``label,score`` (surrounding spaces ignored); every row has
    two fields; labels are ``0`` or ``1``; scores are finite numbers in ``[0, 1]``; the file
    has at least one data row. A party holding one class only is valid.
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"{p}: no such file")
    if os.path.isdir(p):
        raise IsADirectoryError(f"{p}: is a directory, expected a CSV file")
    labels: list[int] = []
    scores: list[float] = []
    with open(p, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise PartyFileError(f"{p}: file is empty; expected a header 'label,score'")
        cols = [h.strip().lower() for h in header]
        if cols != ["label", "score"]:
            raise PartyFileError(
                f"{p}, row 1: header must be exactly 'label,score'; got {','.join(header)!r}"
            )
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue  # blank lines are allowed
            if len(row) != 2:
                raise PartyFileError(
                    f"{p}, row {line}: expected 2 columns (label,score); got {len(row)}"
                )
            lab_s, sc_s = row[0].strip(), row[1].strip()
            if lab_s not in ("0", "1", "0.0", "1.0"):
                raise PartyFileError(f"{p}, row {line}: label must be 0 or 1; got {lab_s!r}")
            try:
                sc = float(sc_s)
            except ValueError:
                raise PartyFileError(
                    f"{p}, row {line}: score must be a number; got {sc_s!r}"
                ) from None
            if not math.isfinite(sc):
                raise PartyFileError(f"{p}, row {line}: score must be finite; got {sc_s!r}")
            if sc < 0.0 or sc > 1.0:
                raise PartyFileError(f"{p}, row {line}: score must be in [0, 1]; got {sc_s}")
            labels.append(int(float(lab_s)))
            scores.append(sc)
    if not labels:
        raise PartyFileError(f"{p}: no data rows after the header")
    return PartyData(
        name=os.path.basename(p),
        y_true=np.asarray(labels, dtype=np.int64),
        y_score=np.asarray(scores, dtype=np.float64),
    )


def load_party_csvs(paths: Sequence[str | os.PathLike[str]]) -> list[PartyData]:
    """Load several party files and check that the federation has both classes."""
    if not paths:
        raise ValueError("at least one party file is required")
    parties = [load_party_csv(p) for p in paths]
    pos = sum(int(d.y_true.sum()) for d in parties)
    total = sum(d.n_samples for d in parties)
    if pos == 0 or pos == total:
        only = "positive" if pos else "negative"
        raise UndefinedMetricError(
            f"AUC is undefined: all {total} samples across {len(parties)} party file(s) are "
            f"{only}; the federation needs both classes."
        )
    return parties


def write_party_csv(path: str | os.PathLike[str], y_true: Sequence[int] | NDArray[np.int64],
                    y_score: Sequence[float] | NDArray[np.float64]) -> None:
    """Write a party file in the format :func:`load_party_csv` reads."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["label", "score"])
        for lab, sc in zip(y_true, y_score, strict=True):
            w.writerow([int(lab), repr(float(sc))])
