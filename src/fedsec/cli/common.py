"""What the ``fedsec`` sub-commands share: argument types, party-file options, progress.

Argument types are built from the library's own checks (:mod:`fedsec._validation`): an
option's constraint is stated once, as keyword arguments of :func:`arg_type`, and checked by
the same function that checks the Python parameter; only the message changes, to name the
command-line option (``--runs must be in 2..8; got '1'``).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fedsec._validation import (
    ParameterError,
    check_choice,
    check_int,
    check_real,
    int_rule,
    real_rule,
)
from fedsec.shapley.rounds import format_seconds

__all__ = ["arg_type", "list_arg", "points_arg", "scores_arg", "progress_printer",
           "add_party_file_options", "load_party_files", "DELIMITERS"]

T = TypeVar("T")

#: How each checker reads the option's text before checking it, and what it says when the
#: text is not of that kind.
_READERS: dict[Callable[..., Any], tuple[Callable[[str], Any], str]] = {
    check_int: (int, "an integer"),
    check_real: (float, "a number"),
    check_choice: (str, "a string"),
}


def _rule(check: Callable[..., Any], constraint: dict[str, Any], exc: Exception) -> str:
    """The whole constraint in words (both bounds, where the library names the one broken)."""
    if check is check_int:
        return int_rule(constraint.get("min_value"), constraint.get("max_value"))
    if check is check_real and isinstance(exc, ParameterError) and exc.rule != "finite":
        return real_rule(constraint.get("gt"), constraint.get("ge"), constraint.get("lt"),
                         constraint.get("le"))
    return exc.rule if isinstance(exc, ParameterError) else str(exc)


def arg_type(check: Callable[..., T], option: str, *, hint: str = "",
             **constraint: Any) -> Callable[[str], T]:
    """An argparse ``type`` for ``option`` that applies the library's ``check``.

    Parameters
    ----------
    check : callable
        :func:`~fedsec._validation.check_int`, :func:`~fedsec._validation.check_real` or
        :func:`~fedsec._validation.check_choice`.
    option : str
        The option's name as the user typed it (``"--runs"``); errors name it.
    hint : str
        Added to the message of a value that breaks the constraint.
    **constraint
        The checker's keyword arguments (``min_value=2, max_value=8``; ``gt=0.0``; ...).

    Returns
    -------
    callable
        ``parse(text) -> value``; raises :class:`argparse.ArgumentTypeError` naming
        ``option`` and the rule.
    """
    read, kind = _READERS[check]

    def parse(text: str) -> T:
        try:
            value = read(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} must be {kind}; got {text!r}") from None
        try:
            return check(value, option, "fedsec", **constraint)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(
                f"{option} must be {_rule(check, constraint, exc)}; got {text!r}{hint}"
            ) from None

    parse.__name__ = option  # argparse names the type in some messages
    return parse


def list_arg(option: str, choices: tuple[str, ...], *, everything: bool = False
             ) -> Callable[[str], list[str]]:
    """An argparse ``type`` for a comma-separated list of ``choices`` (``all``: every one,
    when ``everything``); each item is checked by :func:`~fedsec._validation.check_choice`."""
    item = arg_type(check_choice, option, choices=choices)

    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if everything and items == ["all"]:
            return list(choices)
        if not items:
            raise argparse.ArgumentTypeError(
                f"{option} must be a comma-separated list of {', '.join(choices)}"
                + (" or 'all'" if everything else "") + f"; got {text!r}")
        return list(dict.fromkeys(item(t) for t in items))

    return parse


def points_arg(text: str) -> int | str:
    """``--decision-points``: an integer >= 2, or ``exact``."""
    if text.strip().lower() == "exact":
        return "exact"
    value: int = arg_type(check_int, "--decision-points", min_value=2)(text)
    return value


def scores_arg(text: str) -> str:
    """``--scores``: ``probability``, ``logit`` or ``range:LO:HI``."""
    from fedsec.metrics.roc import _parse_scores

    try:
        _parse_scores(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--scores: {exc}") from None
    return text


# ------------------------------------------------------------------ party files
DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t"}


def add_party_file_options(p: argparse.ArgumentParser, *, files_help: str | None = None
                           ) -> None:
    """The positional party files and the options that say how to read them."""
    p.add_argument("files", nargs="+", metavar="PARTY.csv",
                   help=files_help or "one CSV file per party (.csv or .csv.gz): a header "
                   "row, a label column and a score column; other columns are ignored")
    g = p.add_argument_group("party files")
    g.add_argument("--label-col", default="label", metavar="COL",
                   help="name (case-insensitive) or 1-based position of the label column "
                        "(default: label)")
    g.add_argument("--score-col", default="score", metavar="COL",
                   help="name or 1-based position of the score column (default: score); "
                        "scores must lie in [0, 1], those within 1e-9 outside are clipped")
    g.add_argument("--pos-label", default=None, metavar="VALUE",
                   help="the label value meaning positive, for labels other than 0/1, "
                        "True/False and -1/1 (e.g. --pos-label malignant); every other "
                        "value is negative")
    g.add_argument("--delimiter", choices=sorted(DELIMITERS), default=None,
                   help="field delimiter (default: detected from the header row -- comma, "
                        "semicolon or tab; with semicolon or tab a decimal comma as in "
                        "0,75 is read as a decimal number)")
    g.add_argument("--name", action="append", default=None, metavar="NAME", dest="names",
                   help="a party's name, once per file in the same order (default: the "
                        "file name without .csv, with parent directories added where two "
                        "files share a name)")


def load_party_files(args: argparse.Namespace, *, require_both_classes: bool = True,
                     any_finite: bool = False) -> list[Any]:
    """Read ``args.files`` with the party-file options; a list of ``PartyData``.

    ``any_finite``: accept any finite score (``--scores logit`` or ``range:LO:HI``; the
    transform then checks them)."""
    from fedsec.data.io import load_party_csvs

    return load_party_csvs(
        args.files, names=args.names, label_col=args.label_col, score_col=args.score_col,
        pos_label=args.pos_label,
        delimiter=DELIMITERS[args.delimiter] if args.delimiter else None,
        require_both_classes=require_both_classes,
        score_range=None if any_finite else (0.0, 1.0))


# ------------------------------------------------------------------ progress
_ROUND = re.compile(r"\bround (\d+)/(\d+)\b")


def progress_printer(quiet: bool) -> Callable[[str], None]:
    """``say(msg)``: one time-stamped line on stderr per step, unless ``quiet``. A line
    reporting ``round k/T`` of a series (the text before it names the series) also gets
    an estimate of the time left, from the pace of the rounds since the series' first line
    (unless the line already carries one)."""
    start = time.perf_counter()
    series: dict[str, tuple[float, int]] = {}  # series -> (when, round) of its first line

    def say(msg: str) -> None:
        if quiet:
            return
        now = time.perf_counter()
        m = _ROUND.search(msg)
        if m is not None and "ETA" not in msg:
            k, total = int(m.group(1)), int(m.group(2))
            key = f"{msg[:m.start()]}/{total}"
            if k == 1 or key not in series:
                series[key] = (now, k)  # rounds after this one are timed
            first, k0 = series[key]
            if k > k0 and k < total:
                msg += f" (ETA {format_seconds((now - first) / (k - k0) * (total - k))})"
        print(f"[{now - start:7.2f}s] {msg}", file=sys.stderr, flush=True)

    return say
