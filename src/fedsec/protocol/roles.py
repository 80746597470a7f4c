"""What a role receives: the message kinds each role method decodes.

A role method that decodes another role's bytes is marked with :func:`receives`; the table
of every protocol (``protocol step -> role -> method -> message kind``), the fuzz targets
(one per role and kind) and a runtime that dispatches messages to methods are all read
from these marks (:func:`handlers`), so none of them is written per protocol.

>>> class Aggregator:
...     @receives("demo/submit")
...     def aggregate(self, submissions): ...
>>> handlers(Aggregator)
{'demo/submit': 'aggregate'}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fedsec.protocol.wire import valid_kind

__all__ = ["receives", "handlers", "RECEIVES"]

RECEIVES = "__fedsec_receives__"
F = TypeVar("F", bound=Callable[..., Any])


def receives(*kinds: str) -> Callable[[F], F]:
    """Mark a role method as the one that decodes messages of ``kinds`` (no kind: an
    override that receives nothing its base method received)."""
    for k in kinds:
        if not valid_kind(k):
            raise ValueError(f"not a message kind: {k!r}")

    def mark(fn: F) -> F:
        setattr(fn, RECEIVES, tuple(getattr(fn, RECEIVES, ())) + tuple(kinds))
        return fn

    return mark


def handlers(cls: type) -> dict[str, str]:
    """``{message kind: method name}`` of a role class (its own and inherited marks);
    ``ValueError`` if two methods claim one kind."""
    # a marked override replaces the base method's kinds (``@receives()`` with no kind:
    # the override receives nothing); an unmarked override keeps them
    by_name: dict[str, tuple[str, ...]] = {}
    for klass in reversed(cls.__mro__):
        for name, attr in vars(klass).items():
            fn = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
            marks = getattr(fn, RECEIVES, None)
            if marks is not None:
                by_name[name] = tuple(marks)
    out: dict[str, str] = {}
    for name, marks in by_name.items():
        for kind in marks:
            if kind in out and out[kind] != name:
                raise ValueError(f"{cls.__name__}: {kind!r} is received by both "
                                 f"{out[kind]} and {name}")
            out[kind] = name
    return out
