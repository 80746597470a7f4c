"""Roles exchange bytes and do their own work: checked on the source of every protocol.

* **Role state is private.** A role is a class with at least one ``@receives`` method
  (:mod:`fedsec.protocol.roles`). Every attribute it assigns on ``self`` starts with ``_``
  (a runner can still read what a role chooses to report, through a read-only property or
  a method's return value; it cannot write or reach into the rest). The one exception is
  ``clock``, the role's own :class:`~fedsec.protocol.accounting.Clock` that a runner sums.
* **Nobody reaches into another object's private state.** In the protocol packages, no
  code reads or writes ``x._name`` for an ``x`` other than ``self`` or ``cls`` -- so an
  in-process runner cannot read a role's data or add into its ciphertexts.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import fedsec
from fedsec.protocol.roles import handlers

SRC = Path(fedsec.__file__).resolve().parent
#: Public role attributes a runner may read: the role's own clock.
PUBLIC_OK = {"clock"}
PROTOCOL_PACKAGES = ("auc", "shapley", "pfl")
#: Modules of those packages that hold no protocol roles or runners (plaintext maths).
PLAINTEXT = {"fedsec.shapley.fsv", "fedsec.shapley.estimators", "fedsec.shapley.utility",
             "fedsec.pfl.balance", "fedsec.pfl.selection", "fedsec.pfl.simulate",
             "fedsec.pfl.robust", "fedsec.auc.attacks", "fedsec.auc.policy"}


def _modules() -> list[str]:
    out = []
    for pkg in PROTOCOL_PACKAGES:
        base = importlib.import_module(f"fedsec.{pkg}")
        out.append(base.__name__)
        for info in pkgutil.walk_packages(base.__path__, prefix=f"fedsec.{pkg}."):
            out.append(info.name)
    out.append("fedsec.crypto.keysetup")  # the key set-up's roles
    return sorted(set(out) - PLAINTEXT)


def role_classes() -> list[type]:
    seen: dict[str, type] = {}
    for name in _modules():
        mod = importlib.import_module(name)
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            if obj.__module__ == name and handlers(obj):
                seen[f"{name}.{obj.__qualname__}"] = obj
    return [seen[k] for k in sorted(seen)]


def _self_assignments(cls: type) -> set[str]:
    out: set[str] = set()
    for klass in cls.__mro__:
        if klass is object or not klass.__module__.startswith("fedsec"):
            continue
        tree = ast.parse(inspect.getsource(klass))
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                            and sub.value.id == "self"):
                        out.add(sub.attr)
    return out


def test_there_are_roles_to_check():
    names = {c.__name__ for c in role_classes()}
    assert len(names) >= 10, names


@pytest.mark.parametrize("cls", role_classes(), ids=lambda c: c.__qualname__)
def test_role_state_is_private(cls: type) -> None:
    public = sorted(a for a in _self_assignments(cls) if not a.startswith("_")
                    and a not in PUBLIC_OK)
    assert not public, f"{cls.__qualname__} keeps public state: {public}"


def _private_reaches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            out.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: .{node.attr}")
    return out


@pytest.mark.parametrize("name", _modules())
def test_no_code_reaches_into_private_state(name: str) -> None:
    mod = importlib.import_module(name)
    assert mod.__file__ is not None
    hits = _private_reaches(Path(mod.__file__))
    assert not hits, "\n".join(hits)
