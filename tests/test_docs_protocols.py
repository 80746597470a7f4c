"""The protocol pages in docs/protocols/ cannot drift from the code.

Each page has a table ``| # | step | role | method | receives | sends |``. For every row
the method (```Class.method```) exists; every kind it *receives* is decoded by exactly that
method (its ``@receives`` mark); every kind it *sends* is one the class's module encodes.
And every ``@receives`` mark of every role class of the product appears in some page.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from fedsec.protocol.roles import handlers
from fedsec.testing.inventory import product_classes

DOCS = Path(__file__).resolve().parents[1] / "docs" / "protocols"
_CELL = re.compile(r"`([^`]+)`")


def _classes() -> dict[str, list[type]]:
    return product_classes()


def _role_classes() -> dict[str, type]:
    out = {}
    for name, found in _classes().items():
        roles = [c for c in found if handlers(c)]
        assert len(roles) <= 1, f"two role classes named {name}"
        if roles:
            out[name] = roles[0]
    return out


def _rows() -> list[tuple[str, list[str]]]:
    rows = []
    for page in sorted(DOCS.glob("*.md")):
        for line in page.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 6 and "." in cells[3] and cells[3].startswith("`"):
                rows.append((page.name, cells))
    return rows


def test_pages_have_tables():
    assert len({p for p, _ in _rows()}) >= 1


@pytest.mark.parametrize("page,cells", _rows(), ids=lambda x: x if isinstance(x, str) else
                         x[3].strip("`"))
def test_row_matches_the_code(page: str, cells: list[str]) -> None:
    found = _classes()
    cls_name, method = cells[3].strip("`").split(".")
    assert len(found.get(cls_name, [])) == 1, f"{page}: no single class named {cls_name}"
    cls = found[cls_name][0]
    mod = importlib.import_module(cls.__module__)
    assert callable(getattr(cls, method, None)), f"{page}: {cls_name}.{method} does not exist"
    marks = handlers(cls)
    for kind in _CELL.findall(cells[4]):
        assert marks.get(kind) == method, f"{page}: {cls_name}.{method} does not receive {kind}"
    src = inspect.getsource(mod)
    for kind in _CELL.findall(cells[5]):
        assert f'"{kind}"' in src, f"{page}: {cls_name}'s module never encodes {kind}"


def test_every_received_kind_is_documented():
    documented = set()
    for _, cells in _rows():
        cls_name, method = cells[3].strip("`").split(".")
        documented.update((cls_name, k) for k in _CELL.findall(cells[4]))
    roles = _role_classes()
    concrete = {n: c for n, c in roles.items()  # a shared base is documented by its heirs
                if not any(o is not c and issubclass(o, c) for o in roles.values())}
    missing = sorted((name, kind) for name, cls in concrete.items()
                     for kind in handlers(cls) if (name, kind) not in documented)
    assert not missing, f"undocumented (role, kind) pairs: {missing}"
