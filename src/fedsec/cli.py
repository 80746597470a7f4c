"""The ``fedsec`` command line.

Sub-commands live in small modules that expose ``register(subparsers)``; each registered
handler returns the process exit code. Errors in user input print one clear line on stderr
and exit with status 2; protocol failures and detected tampering exit with status 3.

Sub-commands: ``auc`` and ``demo`` (:mod:`fedsec.cli_auc`), ``dpauc`` and ``attack``
(:mod:`fedsec.cli_dpauc`), ``identity`` and ``roster`` (:mod:`fedsec.cli_identity`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from fedsec import __version__
from fedsec.errors import FedsecError, TamperingDetected

__all__ = ["main", "build_parser"]

# Modules that add sub-commands. Each must define ``register(subparsers) -> None`` and set
# ``func`` on its parsers (``parser.set_defaults(func=handler)``), where
# ``handler(args: argparse.Namespace) -> int``.
COMMAND_MODULES: tuple[str, ...] = (
    "fedsec.cli_auc",
    "fedsec.cli_dpauc",
    "fedsec.cli_identity",
    "fedsec.cli_shapley",
    "fedsec.cli_pfl",
)


class UsageError(FedsecError):
    """Bad command-line input (file, row and rule named in the message)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedsec",
        description="Privacy-preserving evaluation for federated learning.",
    )
    parser.add_argument("--version", action="version", version=f"fedsec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # module not written yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
        return code
    except TamperingDetected as exc:
        print(f"fedsec: TAMPERING DETECTED ({exc.check}): {exc}", file=sys.stderr)
        return 3
    except (UsageError, ValueError, TypeError, FileNotFoundError, IsADirectoryError) as exc:
        print(f"fedsec: error: {exc}", file=sys.stderr)
        return 2
    except FedsecError as exc:
        print(f"fedsec: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("fedsec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
