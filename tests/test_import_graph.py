"""The layering rules that a reader relies on, checked on the import graph of src/fedsec.

* The product never imports the testing package (adversaries, tamper batteries, fuzzers,
  stand-ins), except the demo command, which shows a cheating aggregator on purpose.
* The protocol layer imports only the ground modules (errors) and itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fedsec"
#: Modules that may import fedsec.testing, and why.
TESTING_ALLOWED = {"fedsec.cli.auc": "fedsec demo's cheating aggregator"}


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    mod = _module(path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            out.add(prefix)
            out.update(f"{prefix}.{a.name}" for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in SRC.rglob("*.py")}


def test_product_never_imports_the_testing_package():
    bad = {mod: sorted(i for i in imps if i == "fedsec.testing" or i.startswith("fedsec.testing."))
           for mod, imps in _graph().items()
           if not mod.startswith("fedsec.testing") and mod not in TESTING_ALLOWED}
    assert not {m: i for m, i in bad.items() if i}


def test_protocol_layer_imports_only_the_ground():
    for mod, imps in _graph().items():
        if mod.startswith("fedsec.protocol"):
            fedsec = {i for i in imps if i.startswith("fedsec")}
            assert all(i.startswith(("fedsec.protocol", "fedsec.errors")) for i in fedsec), \
                (mod, sorted(fedsec))


def test_the_graph_is_read():
    g = _graph()
    assert "fedsec.protocol.wire" in g and "fedsec.errors" in g["fedsec.protocol.wire"]
