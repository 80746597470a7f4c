"""The product's modules and role classes, for tests that check every protocol at once
(the docs tables, the fuzz coverage, the role boundaries)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import fedsec
from fedsec.protocol.roles import handlers

__all__ = ["product_modules", "product_classes", "role_classes"]

#: Packages that hold no protocol roles: this one, the Flower runtime, the command line.
SKIP = ("fedsec.testing", "fedsec.runtime", "fedsec.cli")


def product_modules() -> list[str]:
    """Every module of ``src/fedsec`` outside :data:`SKIP` (namespace packages included)."""
    src = Path(fedsec.__file__).resolve().parent
    out = []
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if not name.startswith(SKIP):
            out.append(name)
    return out


def product_classes() -> dict[str, list[type]]:
    """Every class defined in a product module, by name."""
    out: dict[str, list[type]] = {}
    for name in product_modules():
        mod = importlib.import_module(name)
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            if obj.__module__ == name:
                out.setdefault(obj.__name__, []).append(obj)
    return out


def role_classes(*, concrete: bool = False) -> dict[str, type]:
    """Every class with ``@receives`` marks, by qualified name; ``concrete``: without the
    shared bases that other role classes extend."""
    found = {f"{c.__module__}.{c.__qualname__}": c for cs in product_classes().values()
             for c in cs if handlers(c)}
    if concrete:
        found = {k: c for k, c in found.items()
                 if not any(o is not c and issubclass(o, c) for o in found.values())}
    return found
