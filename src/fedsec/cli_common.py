"""What the ``fedsec`` sub-commands share: argument parsers in the user's terms, progress."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable

from fedsec.shapley.rounds import format_seconds

__all__ = ["int_arg", "progress_printer"]


def int_arg(name: str, low: int | None = None, high: int | None = None
            ) -> Callable[[str], int]:
    """An argparse ``type`` for an integer option ``name`` in ``low..high``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer; got {text!r}"
                                             ) from None
        if (low is not None and v < low) or (high is not None and v > high):
            bound = (f"in {low}..{high}" if low is not None and high is not None
                     else f">= {low}" if low is not None else f"<= {high}")
            raise argparse.ArgumentTypeError(f"{name} must be {bound}; got {text!r}")
        return v
    return parse


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
