"""What the ``fedsec`` sub-commands share: argument parsers in the user's terms, progress."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

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


def progress_printer(quiet: bool) -> Callable[[str], None]:
    """``say(msg)``: one time-stamped line on stderr per step, unless ``quiet``."""
    start = time.perf_counter()

    def say(msg: str) -> None:
        if not quiet:
            print(f"[{time.perf_counter() - start:7.2f}s] {msg}", file=sys.stderr, flush=True)
    return say
