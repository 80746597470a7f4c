"""The ``fedsec`` command line.

Sub-commands live in small modules that expose ``register(subparsers)``; each registered
handler returns the process exit code. Errors print one line on stderr, and the exit status
says what kind of failure it was (:data:`EXIT_CODES`, also in ``fedsec --help``):

0 success; 2 bad input (a file, a row or an option breaks a rule, or a size limit);
3 tampering detected (malicious mode's verification failed: no AUC is printed); 4 protocol
error (a malformed message, or a party's policy refuses the run); 5 undefined result (e.g.
AUC with one class in the whole federation); 130 interrupted; 141 output pipe closed early
(``fedsec ... | head``: ends quietly).

One module per sub-command: ``auc``, ``check`` and ``demo`` (:mod:`fedsec.cli.auc`);
``dpauc``, ``attack`` and ``reproduce`` (:mod:`fedsec.cli.dpauc`); ``identity`` and
``roster`` (:mod:`fedsec.cli.identity`); ``shapley`` (:mod:`fedsec.cli.shapley`); ``pfl``
(:mod:`fedsec.cli.pfl`); ``flower`` (:mod:`fedsec.cli.flower`). What they share -- option
types built from :mod:`fedsec._validation`'s checks, the party-file options, progress
lines -- is in :mod:`fedsec.cli.common`. Warnings print once each as ``fedsec: warning:``
(``fedsec: privacy warning:`` for a :class:`~fedsec.errors.PrivacyWarning`), without
source lines; library messages that name a Python parameter are shown with the command's
option instead (:func:`cli_text`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import textwrap
import warnings
from collections.abc import Sequence
from typing import Any

from fedsec import __version__
from fedsec.errors import (
    FedsecError,
    PolicyViolation,
    PrivacyWarning,
    ProtocolError,
    TamperingDetected,
    UndefinedMetricError,
)
from fedsec.runtime.safetext import printable

__all__ = ["main", "build_parser", "EXIT_CODES", "EXIT_OK", "EXIT_BAD_INPUT",
           "EXIT_TAMPERING", "EXIT_PROTOCOL", "EXIT_UNDEFINED", "EXIT_INTERRUPTED",
           "EXIT_BROKEN_PIPE", "cli_text"]

# Modules that add sub-commands. Each must define ``register(subparsers) -> None`` and set
# ``func`` on its parsers (``parser.set_defaults(func=handler)``), where
# ``handler(args: argparse.Namespace) -> int``.
COMMAND_MODULES: tuple[str, ...] = (
    "fedsec.cli.auc",
    "fedsec.cli.dpauc",
    "fedsec.cli.identity",
    "fedsec.cli.shapley",
    "fedsec.cli.pfl",
    "fedsec.cli.flower",
)


#: Exit statuses, documented in ``fedsec --help`` and docs/guide/command-line.md.
EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_TAMPERING = 3
EXIT_PROTOCOL = 4
EXIT_UNDEFINED = 5
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_BAD_INPUT: "bad input: a file, row or option breaks a rule, or a size limit "
                    "(the message names the file, row and rule, or the option that lifts "
                    "the limit)",
    EXIT_TAMPERING: "tampering detected: a malicious-mode check failed; no AUC is printed",
    EXIT_PROTOCOL: "protocol error: a malformed or inconsistent message, or a party's "
                   "policy refuses the run",
    EXIT_UNDEFINED: "undefined result: e.g. AUC when the federation holds one class only",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_BROKEN_PIPE: "standard output closed early (fedsec ... | head): ends quietly",
}


class UsageError(FedsecError):
    """Bad command-line input (file, row and rule named in the message)."""


def _epilog() -> str:
    lines = ["exit status:"]
    for code, text in EXIT_CODES.items():
        lines += textwrap.wrap(f"{code:<4} {text}", width=86, initial_indent="  ",
                               subsequent_indent="       ")
    lines += ["", "fedsec auc and fedsec dpauc play every party in one process, for trying "
              "things out;", "real deployments run one party per machine on Flower "
              "(docs/run-across-machines.md)."]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedsec",
        description="Privacy-preserving evaluation for federated learning.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fedsec {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # module not written yet
                continue
            raise
        module.register(sub)
    _record_options(parser)
    return parser


def _record_options(parser: argparse.ArgumentParser) -> None:
    """Give every (sub-)command's namespace the set of its long options, so that messages
    can speak of ``--score-epsilon`` where the library speaks of ``score_epsilon``."""
    options = frozenset(o for a in parser._actions for o in a.option_strings
                        if o.startswith("--"))
    parser.set_defaults(_fedsec_options=options)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _record_options(child)


_QUOTED_PARAM = re.compile(r"\bThe '([a-z][a-z0-9_]*)' parameter of [\w.]+")
_ASSIGNED = re.compile(r"\b([a-z][a-z0-9_]*)=(?:'([^'\s]*)'|([\w.+-]+))")
_IDENT = re.compile(r"(?<![-\w.'])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b(?![(.])")


def cli_text(text: str, options: frozenset[str]) -> str:
    """``text`` (a library message) with Python parameter names replaced by the command's
    options: ``The 'runs' parameter of secure_auc_malicious`` -> ``--runs``,
    ``schedule='paper'`` -> ``--schedule paper``, ``score_epsilon`` -> ``--score-epsilon``.
    Only names that are options of the running command are replaced."""
    def option(name: str) -> str | None:
        opt = "--" + name.replace("_", "-")
        return opt if opt in options else None

    def quoted(m: re.Match[str]) -> str:
        return option(m.group(1)) or m.group(0)

    def assigned(m: re.Match[str]) -> str:
        opt = option(m.group(1))
        return f"{opt} {m.group(2) if m.group(2) is not None else m.group(3)}" if opt \
            else m.group(0)

    def ident(m: re.Match[str]) -> str:
        return option(m.group(1)) or m.group(0)

    text = _QUOTED_PARAM.sub(quoted, text)
    text = _ASSIGNED.sub(assigned, text)
    return _IDENT.sub(ident, text)


def _silence_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the exit-time flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a descriptor
        pass


def _show_warning(message: Warning | str, category: type[Warning], filename: str,
                  lineno: int, file: Any = None, line: str | None = None) -> None:
    """A warning as the command line's own line on stderr (no source location, options
    named as the command line spells them), each distinct text once per command."""
    text = printable(cli_text(str(message), _options))
    if text in _shown:
        return
    _shown.add(text)
    kind = "privacy warning" if issubclass(category, PrivacyWarning) else "warning"
    print(f"fedsec: {kind}: {text}", file=sys.stderr, flush=True)


_shown: set[str] = set()
_options: frozenset[str] = frozenset()


def _run(args: argparse.Namespace) -> int:
    global _options
    _options = getattr(args, "_fedsec_options", frozenset())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")  # _show_warning prints each text once
            warnings.showwarning = _show_warning
            _shown.clear()
            code: int = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except TamperingDetected as exc:
        print(f"fedsec: TAMPERING DETECTED ({printable(exc.check)}): {printable(exc)}",
              file=sys.stderr)
        return EXIT_TAMPERING
    except UndefinedMetricError as exc:
        print(f"fedsec: undefined result: {printable(exc)}", file=sys.stderr)
        return EXIT_UNDEFINED
    except PolicyViolation as exc:
        print(f"fedsec: protocol error (policy: {printable(exc.check)}): {printable(exc)}",
              file=sys.stderr)
        return EXIT_PROTOCOL
    except ProtocolError as exc:
        print(f"fedsec: protocol error: {printable(exc)}", file=sys.stderr)
        return EXIT_PROTOCOL
    except (UsageError, ValueError, TypeError) as exc:
        print(f"fedsec: error: {printable(cli_text(str(exc), _options))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"fedsec: error: {printable(where)}{printable(exc.strerror or exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except FedsecError as exc:
        print(f"fedsec: error: {printable(exc)}", file=sys.stderr)
        return EXIT_PROTOCOL
    except KeyboardInterrupt:
        print("fedsec: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``fedsec`` command; return its exit status (:data:`EXIT_CODES`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)  # prints --help itself
        if not getattr(args, "func", None):
            parser.print_help()
            sys.stdout.flush()
            return EXIT_BAD_INPUT
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return _run(args)

