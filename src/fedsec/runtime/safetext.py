"""One helper for every text the runtime logs or prints that may carry hostile bytes.

A server, a node or a file can put any characters into a name, a roster entry, a message
kind or an error text. Written verbatim to a log, a newline or carriage return starts a
line that looks like the node's own (``... fedsec-node INFO: result: AUC 0.99
verified``) and terminal escapes rewrite what an operator sees. :func:`printable`
escapes every non-printable character (``\\n`` -> ``\\\\n``, ``\\x1b`` -> ``\\\\x1b``,
``\\u2028`` -> ``\\\\u2028``) and backslashes themselves, so the escaped text is one line
that can be read back unambiguously. :class:`EscapingFormatter` applies it to every
record of a handler: the message, and the traceback lines (each indented under ``| ``);
:class:`EscapingFilter` rewrites the records of a logger the same way before any handler
(its own or an ancestor's, e.g. one a library installed on the root logger) sees them.
This module does not import Flower.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["EscapingFilter", "EscapingFormatter", "printable"]

#: Longest text kept (a hostile peer must not fill a log with one message).
MAX_CHARS = 4000


def _escape_char(c: str) -> str:
    if c == "\\":
        return "\\\\"
    if c.isprintable():
        return c
    code = ord(c)
    if c in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[c]
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(value: Any, limit: int = MAX_CHARS) -> str:
    """``str(value)`` on one line: non-printable characters and backslashes escaped,
    cut to ``limit`` characters (marked ``...[cut]``)."""
    text = value if isinstance(value, str) else str(value)
    out = "".join(_escape_char(c) for c in text[:limit])
    return out + "...[cut]" if len(text) > limit else out


class EscapingFormatter(logging.Formatter):
    """A formatter whose records are each one line (message escaped by
    :func:`printable`), tracebacks indented so no line of them looks like a record."""

    def format(self, record: logging.LogRecord) -> str:
        if not getattr(record, "_fedsec_escaped", False):  # else EscapingFilter did it
            record = logging.makeLogRecord(record.__dict__)
            record.msg = printable(record.getMessage())
            record.args = None
        return super().format(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return _traceback_text(ei)

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return "\n".join("  | " + printable(line) for line in stack_info.splitlines())


def _traceback_text(ei: Any) -> str:
    text = logging.Formatter().formatException(ei)
    return "\n".join("  | " + printable(line) for line in text.splitlines())


class EscapingFilter(logging.Filter):
    """A logger filter that makes every record safe for any handler: the message
    escaped by :func:`printable` (arguments merged in), the traceback pre-formatted with
    each line escaped and indented under ``  | ``."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = printable(record.getMessage())
        record.args = None
        if record.exc_info and not getattr(record, "_fedsec_escaped", False):
            record.exc_text = _traceback_text(record.exc_info)
            record.exc_info = None
        record._fedsec_escaped = True
        return True
